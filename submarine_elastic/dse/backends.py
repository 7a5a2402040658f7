"""Backends that measure a point: the simulator, or any command (a real job on the pseudo-cluster).

``simulator`` settings (all optional; a point's values override the space's ``fixed`` ones):

| setting | meaning (default) |
|---|---|
| ``workload`` | a workload name or CSV (``workload-1``); ``single``: one job of ``application`` arriving at 0 |
| ``application`` | keep only this application's jobs (with ``single``: the job's application) |
| ``data`` | the Pollux data directory (``$SUBMARINE_POLLUX_DATA``) |
| ``cluster`` / ``nodes``, ``gpus_per_node`` | the cluster, ``NxG`` (``16x4``) |
| ``policy`` | a scheduler as ``submarine sim run --policy`` takes it (``fifo``) |
| ``elastic`` | false: policies see every job fixed at its requested size (true) |
| ``workers`` / ``min_workers`` / ``max_workers`` | every job's requested workers / limits (the workload's) |
| ``batch_size`` / ``batch_per_worker`` | every job's global batch / per-worker batch x workers (the workload's) |
| ``interval_s``, ``cooldown_s`` | scheduling round, policy cooldown (60, 60) |
| ``scale_out_cost_s``, ``scale_in_cost_s``, ``start_cost_s``, ``restart_cost_s`` | resize costs (live defaults) |
| ``batch_rule`` | ``fixed-local`` or ``fixed-global`` |
| ``sample_jobs``, ``seed``, ``arrival_scale`` | replay N jobs drawn by seed; multiply arrival times |

Metrics: ``mean_jct_s``, ``median_jct_s``, ``p99_jct_s``, ``makespan_s``, ``mean_queueing_s``,
``mean_utilisation``, ``resizes``, ``preemptions``, ``finished``, ``jobs``.

``command``: ``command`` is a template; ``{setting}`` placeholders (and ``{point_id}``) are replaced by the
point's settings, and the command runs without a shell. The metric ``wall_s`` is its run time; if its last
line of output is a JSON object, its numeric fields are metrics too. A real job on the pseudo-cluster is
``submarine job run --name dse-{point_id} --num_workers {workers} ... --wait_job_finish``.

``pseudo-cluster``: a real job per point, measured through the metrics service; see
:mod:`submarine_elastic.dse.pseudo_cluster`.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submarine_elastic.dse.api import Backend, BackendError, Point, Value
from submarine_elastic.dse.pseudo_cluster import PseudoClusterBackend
from submarine_elastic.sim import (
    BatchRule,
    ClusterConfig,
    JobSpec,
    ResizeCosts,
    SimConfig,
    SimError,
    TraceCatalog,
    load_scheduler,
    load_workload,
    resolve_workload,
    simulate,
)
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals

SIMULATOR_SETTINGS = frozenset(
    {
        "workload",
        "application",
        "data",
        "cluster",
        "nodes",
        "gpus_per_node",
        "policy",
        "elastic",
        "workers",
        "min_workers",
        "max_workers",
        "batch_size",
        "batch_per_worker",
        "interval_s",
        "cooldown_s",
        "scale_out_cost_s",
        "scale_in_cost_s",
        "start_cost_s",
        "restart_cost_s",
        "batch_rule",
        "sample_jobs",
        "seed",
        "arrival_scale",
    }
)
SIMULATOR_METRICS = (
    "mean_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "makespan_s",
    "mean_queueing_s",
    "mean_utilisation",
    "resizes",
    "preemptions",
    "finished",
    "jobs",
)


@dataclass(frozen=True)
class SimulatorBackend(Backend):
    """Measures a point with :func:`submarine_elastic.sim.simulate` (see the module docstring)."""

    name = "simulator"

    def parameters(self) -> frozenset[str]:
        return SIMULATOR_SETTINGS

    def metrics(self) -> tuple[str, ...]:
        return SIMULATOR_METRICS

    def measure(self, point: Point) -> dict[str, float]:
        """Simulate the point. Blocks for the simulation (seconds for a 160-job workload).

        Raises:
            BackendError: a setting is unknown or has a bad value, or the simulation fails.
        """
        s = point.settings()
        unknown = sorted(set(s) - SIMULATOR_SETTINGS)
        if unknown:
            raise BackendError(f"point {point.point_id}: the simulator has no setting {', '.join(unknown)}")
        try:
            return self._measure(s)
        except (SimError, ValueError, TypeError) as exc:
            raise BackendError(f"point {point.point_id} ({_describe(point)}): {exc}") from exc

    def _measure(self, s: dict[str, Value]) -> dict[str, float]:
        data = Path(str(s["data"])) if "data" in s else None
        catalog = TraceCatalog(data)
        jobs = self._jobs(s, catalog)
        if "cluster" in s:
            cluster = ClusterConfig.parse(str(s["cluster"]))
        else:
            cluster = ClusterConfig(int(s.get("nodes", 16)), int(s.get("gpus_per_node", 4)))
        if "restart_cost_s" in s:
            costs = ResizeCosts.restart(float(s["restart_cost_s"]))
        else:
            live = ResizeCosts()
            costs = ResizeCosts(
                start_s=float(s.get("start_cost_s", live.start_s)),
                scale_out_s=float(s.get("scale_out_cost_s", live.scale_out_s)),
                scale_in_s=float(s.get("scale_in_cost_s", live.scale_in_s)),
            )
        config = SimConfig(
            interval_s=float(s.get("interval_s", 60.0)),
            costs=costs,
            batch_rule=BatchRule(str(s.get("batch_rule", BatchRule.FIXED_LOCAL.value))),
        )
        scheduler = load_scheduler(
            str(s.get("policy", "fifo")),
            cooldown_s=float(s.get("cooldown_s", 60.0)),
            elastic=_bool(s.get("elastic", True)),
        )
        summary = simulate(jobs, cluster, scheduler, catalog=catalog, config=config).summary
        return {name: float(getattr(summary, name)) for name in SIMULATOR_METRICS}

    @staticmethod
    def _jobs(s: dict[str, Value], catalog: TraceCatalog) -> list[JobSpec]:
        workload = str(s.get("workload", "workload-1"))
        app = str(s["application"]) if "application" in s else None
        if workload == "single":
            if app is None:
                raise ValueError("workload 'single' needs an application")
            base = catalog.get(app)
            jobs = [JobSpec(app, 0.0, app, 1, base.init_batch_size)]
        else:
            jobs = load_workload(resolve_workload(workload, catalog.data_dir), catalog.names())
            if app is not None:
                jobs = [j for j in jobs if j.application == app]
                if not jobs:
                    raise ValueError(f"workload {workload!r} has no {app!r} job")
        if "sample_jobs" in s:
            jobs = sample_jobs(jobs, min(int(s["sample_jobs"]), len(jobs)), int(s.get("seed", 0)))
        if "arrival_scale" in s:
            jobs = scale_arrivals(jobs, float(s["arrival_scale"]))
        return [_override(j, s) for j in jobs]


def _override(job: JobSpec, s: dict[str, Value]) -> JobSpec:
    workers = int(s.get("workers", job.num_replicas))
    if "batch_size" in s:
        batch = int(s["batch_size"])
    elif "batch_per_worker" in s:
        batch = int(s["batch_per_worker"]) * workers
    elif "workers" in s:
        batch = max(1, round(job.batch_size / job.num_replicas * workers))
    else:
        batch = job.batch_size
    low = int(s["min_workers"]) if "min_workers" in s else job.min_replicas
    high = int(s["max_workers"]) if "max_workers" in s else job.max_replicas
    if low is not None:
        workers = max(workers, low)
    if high is not None:
        workers = min(workers, high)
    return JobSpec(job.name, job.arrival_s, job.application, workers, batch, low, high)


def _bool(value: Value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "yes", "1", "elastic"):
        return True
    if text in ("false", "no", "0", "fixed"):
        return False
    raise ValueError(f"elastic must be true/false (or elastic/fixed), got {value!r}")


def _describe(point: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.values.items())


@dataclass(frozen=True)
class CommandBackend(Backend):
    """Runs a command per point (see the module docstring). ``metrics`` names the fields recorded."""

    command: str
    timeout_s: float = 3600.0
    cwd: str | None = None
    metric_names: tuple[str, ...] = ("wall_s",)

    name = "command"

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise BackendError("the command backend needs a command")

    def parameters(self) -> None:
        return None

    def metrics(self) -> tuple[str, ...]:
        return self.metric_names

    def measure(self, point: Point) -> dict[str, float]:
        """Run the command for ``point``; blocks until it exits or ``timeout_s`` passes.

        Raises:
            BackendError: a placeholder has no setting, the command cannot start, exits non-zero, or
                times out (the message carries the tail of its output).
        """
        values: dict[str, Any] = {**point.settings(), "point_id": point.point_id}
        try:
            argv = [part.format_map(values) for part in shlex.split(self.command)]
        except KeyError as exc:
            raise BackendError(f"point {point.point_id}: the command uses {{{exc.args[0]}}}, which is not set") from exc
        except ValueError as exc:
            raise BackendError(f"point {point.point_id}: bad command template: {exc}") from exc
        t0 = time.monotonic()
        try:
            proc = subprocess.run(  # noqa: S603 - the user's own command, no shell
                argv, capture_output=True, text=True, timeout=self.timeout_s, cwd=self.cwd, check=False
            )
        except FileNotFoundError as exc:
            raise BackendError(f"point {point.point_id}: cannot run {argv[0]!r}: {exc.strerror}") from exc
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"point {point.point_id}: {argv[0]} timed out after {self.timeout_s:.0f} s") from exc
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise BackendError(f"point {point.point_id}: {argv[0]} exited {proc.returncode}: {' | '.join(tail)}")
        metrics: dict[str, float] = {"wall_s": wall}
        lines = proc.stdout.strip().splitlines()
        if lines:
            try:
                reported = json.loads(lines[-1])
            except json.JSONDecodeError:
                reported = None
            if isinstance(reported, dict):
                for key, value in reported.items():
                    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                        metrics[str(key)] = float(value)
        return metrics


def make_backend(name: str, options: dict[str, Any]) -> Backend:
    """The backend a space names (nothing outside this process is asked yet: see ``check_ready``).

    Raises:
        BackendError: unknown backend, or bad options.
    """
    if name == "simulator":
        return SimulatorBackend()
    if name == "command":
        try:
            return CommandBackend(
                command=str(options["command"]),
                timeout_s=float(options.get("timeout_s", 3600.0)),
                cwd=options.get("cwd"),
                metric_names=tuple(options.get("metrics") or ("wall_s",)),
            )
        except KeyError as exc:
            raise BackendError(f"the command backend needs {exc.args[0]!r}") from exc
    if name == "pseudo-cluster":
        known = {"command", "workdir", "timeout_s", "loss_window", "worker_resources", "env", "job_name", "rm_url"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BackendError(f"the pseudo-cluster backend has no option {', '.join(unknown)}")
        settings = {k: v for k, v in options.items() if v is not None}
        workdir = settings.pop("workdir", None)
        return PseudoClusterBackend(workdir=str(Path(workdir).resolve()) if workdir else str(Path.cwd()), **settings)
    raise BackendError(f"unknown backend {name!r}; known: simulator, command, pseudo-cluster")
