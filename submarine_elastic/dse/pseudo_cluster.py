"""The ``pseudo-cluster`` backend: every point is a real ``submarine job run`` on the running cluster.

For each point the backend

1. starts a metrics service of its own (in process, on 127.0.0.1, port 0, a fresh token);
2. submits the job as ``submarine job run`` does (:func:`submarine_elastic.submit.client.submit`), with
   ``SUBMARINE_METRICS_ENDPOINT`` and ``SUBMARINE_METRICS_TOKEN`` in its environment, so its workers
   stream their steps to that service (``examples/train_elastic.py`` does, as does any script that
   reports through ``tf_hooks``);
3. watches the stream until the smoothed loss reaches ``target_loss``, the job ends, or ``timeout_s``
   passes;
4. kills the job (destroys its YARN service) and stops the metrics service, whatever happened,
   Ctrl-C included.

The metrics service listens on loopback, so the workers must run on this machine: the pseudo-cluster.

Settings (a point's values override the space's ``fixed`` ones):

| setting | the job |
|---|---|
| ``target_loss`` | required: the smoothed loss that counts as trained |
| ``workers`` | ``--num_workers`` (1); also ``--max_workers``, and ``--min_workers`` of a fixed job |
| ``min_workers`` / ``max_workers`` | limits of an elastic job (1 / ``workers``) |
| ``elastic`` | true (default): ``--elastic``; false (or ``fixed``): a fixed-size job |
| ``batch_size`` (or ``global_batch``) | ``--global-batch N`` appended to the command |
| ``batch_per_worker`` | ``--global-batch N*workers`` appended to the command |
| ``commit_interval`` (or ``commit_every``) | ``--commit-every K`` appended to the command |
| ``worker_resources`` | ``--worker_resources`` (the backend's ``worker_resources``) |
| any other name | a ``{name}`` placeholder the command template must use |

A batch or commit setting the template names as a placeholder is substituted there instead of appended.
The template also knows ``{python}`` (this interpreter), ``{job}`` (the job's name) and ``{point_id}``;
string values are shell-quoted (the workers run the command with ``bash -c``).

Metrics (one CSV column each; empty when unknown):

- ``time_to_target_s``: from the start of the first step to the end of the step at which the smoothed
  loss reached the target; empty if it never did. ``steps_to_target``: steps trained by then.
- ``startup_s``: from the submit to the start of the first step (containers, imports, the ring).
- ``samples_per_s``: aggregate examples/s at the job's world size, from the metrics store's throughput
  statistics (a moving average of the per-rank rate, times the ranks); ``world_size``: those ranks.
- ``steps``, ``final_loss``: steps seen, and the smoothed loss when watching stopped.
- ``reached``: 1 when the target was reached, else 0.

``time_to_target_s`` leaves the startup out: it depends on the machine's load more than on the
configuration; the wait a user sees is ``startup_s + time_to_target_s``.

Smoothing (``loss_window``): N > 0 (default 10) takes the mean loss of the last N steps, each step's loss
being the mean of what its ranks reported, and decides only on full windows; 0 takes the store's
``loss_ema``, which moves once per reported point, so k ranks move it k times a step: the window is
the fair comparison across worker counts.

A point fails (its row says why, and the run goes on) when the job cannot be submitted, ends in
failure before reaching the target, ends without reporting a step, or reports no step within
``timeout_s``. A job that trains but stops short of the target (it ends, or the timeout passes) is
measured: ``reached`` 0 and no ``time_to_target_s``.
"""

from __future__ import annotations

import logging
import math
import secrets
import shlex
import string
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.cluster import ClusterError, LocalCluster
from submarine_elastic.dse.api import Backend, BackendError, JobRunner, JobState, Point, Value
from submarine_elastic.metrics.api import ServerStartError, Subscription, UnknownJobError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.server import MetricsServer, TlsCredentials
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.protocol.api import DriverUnreachableError, JobPhase, Limits
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import JobRequest, JobSpecError, WorkerResources
from submarine_elastic.submit.service import submit
from submarine_elastic.submit.store import forget_job
from submarine_elastic.tls import TlsError, cluster_ca, loopback_hosts
from submarine_elastic.yarn import ServiceNotFoundError, ServiceState, YarnError, YarnServiceClient

_log = logging.getLogger(__name__)

DEFAULT_COMMAND = "{python} examples/train_elastic.py"
DEFAULT_RESOURCES = "memory-mb=1024,vcores=1"
DEFAULT_JOB_NAME = "dse-{point_id}"
METRICS = (
    "time_to_target_s",
    "steps_to_target",
    "startup_s",
    "samples_per_s",
    "world_size",
    "steps",
    "final_loss",
    "reached",
)
_BATCH = ("batch_size", "global_batch", "batch_per_worker")
_COMMIT = ("commit_interval", "commit_every")
MAPPED_SETTINGS = frozenset(
    {"target_loss", "workers", "min_workers", "max_workers", "elastic", "worker_resources", *_BATCH, *_COMMIT}
)
_BUILTIN_PLACEHOLDERS = frozenset({"python", "job", "point_id"})
_CLEAN_END = (ServiceState.STOPPED, ServiceState.SUCCEEDED)


def placeholders(template: str) -> frozenset[str]:
    """Names a ``str.format`` template uses (``{a}``, ``{a.b}`` and ``{a[0]}`` all name ``a``).

    Raises:
        ValueError: the template is malformed (an unmatched brace).
    """
    names = set()
    for _, fieldname, _, _ in string.Formatter().parse(template):
        if fieldname:
            names.add(fieldname.split(".", 1)[0].split("[", 1)[0])
    return frozenset(names)


@dataclass(frozen=True)
class JobPlan:
    """What a point asks of the cluster, before anything is started."""

    name: str
    launch_cmd: str
    limits: Limits
    elastic: bool
    resources: WorkerResources
    target_loss: float


class LossTracker:
    """The smoothed loss of one job as its points arrive, and when it first reached the target.

    ``window`` > 0: mean of the last ``window`` steps (a step's loss is the mean over the ranks that
    reported it; a recomputed step after an elastic rollback replaces the old value). ``window`` 0: the
    value given to :meth:`add` as ``ema``.
    """

    def __init__(self, target: float, window: int) -> None:
        """Raises:
        ValueError: ``target`` is not finite or ``window`` is negative.
        """
        if not math.isfinite(target):
            raise ValueError(f"target_loss must be a finite number, got {target}")
        if window < 0:
            raise ValueError(f"loss_window must be >= 0, got {window}")
        self.target = target
        self.window = window
        self.first_start: float | None = None
        self.last_step = -1
        self.smoothed: float | None = None
        self.reached_at: float | None = None
        self.reached_step: int | None = None
        self._losses: dict[int, dict[int, float]] = {}

    @property
    def reached(self) -> bool:
        return self.reached_at is not None

    @property
    def points_seen(self) -> bool:
        return self.first_start is not None

    def add(self, points: Iterable[metrics_pb2.RecordedPoint], ema: float | None = None) -> None:
        """Take the next points (in arrival order); ``ema`` is the store's smoothed loss after them."""
        latest: metrics_pb2.RecordedPoint | None = None
        for recorded in points:
            point = recorded.point
            started = point.wall_time - (point.step_time_seconds if point.HasField("step_time_seconds") else 0.0)
            self.first_start = started if self.first_start is None else min(self.first_start, started)
            self.last_step = max(self.last_step, point.step)
            if latest is None or point.wall_time >= latest.point.wall_time:
                latest = recorded
            if self.window and point.HasField("loss") and not self.reached:
                self._losses.setdefault(point.step, {})[recorded.worker.rank] = point.loss
                mean = self._window_mean(point.step)
                if mean is not None:
                    self.smoothed = mean
                    self._check(point.wall_time, point.step)
        if not self.window and ema is not None and latest is not None and not self.reached:
            self.smoothed = ema
            self._check(latest.point.wall_time, self.last_step)

    def _window_mean(self, step: int) -> float | None:
        values = []
        for s in range(step - self.window + 1, step + 1):
            ranks = self._losses.get(s)
            if not ranks:
                return None
            values.append(sum(ranks.values()) / len(ranks))
        return sum(values) / len(values)

    def _check(self, wall_time: float, step: int) -> None:
        if self.smoothed is not None and self.smoothed <= self.target:
            self.reached_at = wall_time
            self.reached_step = step


@dataclass(frozen=True)
class PseudoClusterBackend(Backend):
    """Measures a point as a real job on the pseudo-cluster (see the module docstring).

    ``rm_url`` None: ``SUBMARINE_RM_URL``, else the running local pseudo-cluster (:func:`resolve_rm_url`).
    ``runner`` is the cluster edge; None (the default) talks to that ResourceManager through a
    :class:`YarnJobRunner` per point.
    """

    rm_url: str | None = None
    command: str = DEFAULT_COMMAND
    workdir: str | None = None
    timeout_s: float = 600.0
    loss_window: int = 10
    worker_resources: str = DEFAULT_RESOURCES
    env: Mapping[str, str] = field(default_factory=dict)
    job_name: str = DEFAULT_JOB_NAME
    poll_s: float = 0.5
    state_poll_s: float = 2.0
    runner: JobRunner | None = field(default=None, compare=False, repr=False)

    name = "pseudo-cluster"

    def __post_init__(self) -> None:
        """Raises:
        BackendError: naming the first unusable option.
        """
        if not self.command.strip():
            raise BackendError("the pseudo-cluster backend needs a command")
        try:
            placeholders(self.command)
            placeholders(self.job_name)
        except ValueError as exc:
            raise BackendError(f"the pseudo-cluster backend: bad template: {exc}") from exc
        if placeholders(self.job_name) - {"point_id"}:
            raise BackendError(f"job_name may only use {{point_id}}, got {self.job_name!r}")
        for option, value in (
            ("timeout_s", self.timeout_s),
            ("poll_s", self.poll_s),
            ("state_poll_s", self.state_poll_s),
        ):
            if not value > 0:
                raise BackendError(f"the pseudo-cluster backend: {option} must be positive, got {value}")
        if self.loss_window < 0:
            raise BackendError(f"the pseudo-cluster backend: loss_window must be >= 0, got {self.loss_window}")
        try:
            WorkerResources.parse(self.worker_resources)
        except JobSpecError as exc:
            raise BackendError(f"the pseudo-cluster backend: {exc}") from exc

    def check_ready(self) -> None:
        """Find the ResourceManager and ask it for its version (one request, a few seconds at most).

        Raises:
            BackendError: none is configured and no pseudo-cluster runs, or it does not answer.
        """
        if self.runner is None:
            resolve_rm_url(self.rm_url)

    def parameters(self) -> frozenset[str]:
        return MAPPED_SETTINGS | (placeholders(self.command) - _BUILTIN_PLACEHOLDERS)

    def metrics(self) -> tuple[str, ...]:
        return METRICS

    def plan(self, point: Point) -> JobPlan:
        """The job a point asks for (see the module docstring). Starts nothing.

        Raises:
            BackendError: a setting is missing, unknown or has a bad value (named).
        """
        pid = point.point_id
        s = point.settings()
        try:
            return self._plan(pid, s)
        except ValueError as exc:
            raise BackendError(f"point {pid} ({_describe(point)}): {exc}") from exc

    def _plan(self, pid: str, s: dict[str, Value]) -> JobPlan:
        unknown = sorted(set(s) - self.parameters())
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: neither a job setting nor a placeholder of the command")
        if "target_loss" not in s:
            raise ValueError("target_loss is not set (put it under fixed: or parameters:)")
        target = _float(s, "target_loss")
        if not math.isfinite(target):
            raise ValueError(f"target_loss must be a finite number, got {target}")
        elastic = _flag(s, "elastic", True)
        workers = _int(s, "workers", 1)
        if elastic:
            limits = Limits(workers, _int(s, "min_workers", 1), _int(s, "max_workers", workers))
        else:
            for key in ("min_workers", "max_workers"):
                if key in s and _int(s, key, workers) != workers:
                    raise ValueError(f"{key} {s[key]} needs elastic: a fixed job has exactly workers={workers}")
            limits = Limits(workers, workers, workers)
        resources = WorkerResources.parse(str(s.get("worker_resources", self.worker_resources)))
        name = self.job_name.format(point_id=pid)
        used = placeholders(self.command)
        values: dict[str, object] = {k: shlex.quote(v) if isinstance(v, str) else v for k, v in s.items()}
        values.update(python=shlex.quote(sys.executable), job=name, point_id=pid)
        try:
            command = self.command.format_map(values)
        except KeyError as exc:
            raise ValueError(f"the command uses {{{exc.args[0]}}}, which is not set") from None
        except (IndexError, AttributeError) as exc:
            raise ValueError(f"the command has a placeholder this point cannot fill: {exc}") from None
        batch_keys = [k for k in _BATCH if k in s]
        if len(batch_keys) > 1:
            raise ValueError(f"give one of {', '.join(batch_keys)}, not both")
        if batch_keys and not used & set(_BATCH):
            key = batch_keys[0]
            batch = _int(s, key, 1) * (workers if key == "batch_per_worker" else 1)
            if batch < 1:
                raise ValueError(f"{key} must be at least 1, got {s[key]}")
            command += f" --global-batch {batch}"
        commit_keys = [k for k in _COMMIT if k in s]
        if len(commit_keys) > 1:
            raise ValueError(f"give one of {', '.join(commit_keys)}, not both")
        if commit_keys and not used & set(_COMMIT):
            every = _int(s, commit_keys[0], 1)
            if every < 1:
                raise ValueError(f"{commit_keys[0]} must be at least 1, got {every}")
            command += f" --commit-every {every}"
        return JobPlan(name, command, limits, elastic, resources, target)

    def measure(self, point: Point) -> dict[str, float]:
        """Run the point's job and watch it (see the module docstring). Blocks until the target is
        reached, the job ends, or ``timeout_s`` passes, plus the time to remove the job.

        Raises:
            BackendError: the point is invalid, the job cannot be submitted, fails, or reports nothing.
        """
        plan = self.plan(point)
        store = InMemoryStore(max_jobs=4)
        token = secrets.token_urlsafe(24)
        try:
            insecure = env.settings().insecure
            ca = None if insecure else cluster_ca()
        except (ValueError, TlsError) as exc:
            raise BackendError(f"point {point.point_id}: cannot start measuring: {exc}") from exc
        # Mutual TLS with certificates of the cluster's CA, as the controller's service; plaintext only when
        # SUBMARINE_INSECURE asks for it.
        served = None if ca is None else ca.issue_server("dse metrics", loopback_hosts())
        server = MetricsServer(
            store,
            host="127.0.0.1",
            port=0,
            token=token,
            tls=None if ca is None or served is None else TlsCredentials(served.cert, served.key, ca.cert_pem),
        )
        sub = store.subscribe(plan.name, capacity=1 << 16)
        runner: JobRunner | None = None
        attempted = False
        try:
            rm_url = self.rm_url or resolve_rm_url(probe=False)
            try:
                runner = self.runner or YarnJobRunner(rm_url)
                server.start()
            except (ServerStartError, ValueError) as exc:
                raise BackendError(f"point {point.point_id}: cannot start measuring: {exc}") from exc
            request = JobRequest(
                name=plan.name,
                launch_cmd=plan.launch_cmd,
                limits=plan.limits,
                resources=plan.resources,
                rm_url=rm_url,
                elastic=plan.elastic,
                env={
                    **self.env,
                    "SUBMARINE_METRICS_ENDPOINT": server.address,
                    "SUBMARINE_METRICS_TOKEN": token,
                },
                workdir=Path(self.workdir).resolve() if self.workdir else Path.cwd(),
                insecure=insecure,
                metrics_tls=None if ca is None else ca.issue_client(f"job {plan.name}"[:64]),
            )
            submitted = time.time()
            attempted = True
            runner.submit(request)
            _log.info("point %s: job %s submitted: %s", point.point_id, plan.name, plan.launch_cmd)
            return self._watch(point, plan, runner, store, sub, submitted)
        finally:
            sub.close()
            try:
                if attempted and runner is not None:
                    runner.kill(plan.name)
            except BackendError as exc:
                _log.warning("point %s: job %s may still run: %s", point.point_id, plan.name, exc)
            finally:
                server.stop(grace=0.5)
                store.close()
                if self.runner is None and runner is not None:
                    runner.close()

    def _watch(
        self,
        point: Point,
        plan: JobPlan,
        runner: JobRunner,
        store: InMemoryStore,
        sub: Subscription,
        submitted: float,
    ) -> dict[str, float]:
        tracker = LossTracker(plan.target_loss, self.loss_window)
        deadline = time.monotonic() + self.timeout_s
        next_state = 0.0
        ended: JobState | None = None

        def take(event: metrics_pb2.WatchEvent) -> None:
            ema = None
            if not self.loss_window:
                try:
                    ema = store.summary(plan.name).loss_ema
                except UnknownJobError:
                    ema = None
            tracker.add(event.points, ema)

        while not tracker.reached:
            event = sub.get(self.poll_s)
            if event is not None:
                take(event)
                if tracker.reached:
                    break
            now = time.monotonic()
            if now >= next_state:
                state = runner.state(plan.name)
                if state.ended:
                    while (event := sub.get(0.0)) is not None and not tracker.reached:
                        take(event)
                    ended = state
                    break
                next_state = now + self.state_poll_s
            if now >= deadline:
                break
        where = f"point {point.point_id} ({_describe(point)}), job {plan.name}"
        if not tracker.reached:
            if ended is not None and not ended.ok:
                raise BackendError(f"{where} ended before reaching loss {plan.target_loss}: {ended.detail}")
            if not tracker.points_seen:
                if ended is not None:
                    raise BackendError(
                        f"{where} ended without reporting a step: does its command report to "
                        f"SUBMARINE_METRICS_ENDPOINT? ({ended.detail})"
                    )
                raise BackendError(
                    f"{where} reported no step within {self.timeout_s:.0f} s: {runner.describe(plan.name)}"
                )
        return self._metrics(plan, tracker, store, submitted)

    @staticmethod
    def _metrics(plan: JobPlan, tracker: LossTracker, store: InMemoryStore, submitted: float) -> dict[str, float]:
        out: dict[str, float] = {"reached": float(tracker.reached), "steps": float(tracker.last_step + 1)}
        if tracker.first_start is not None:
            out["startup_s"] = max(0.0, tracker.first_start - submitted)
            if tracker.reached_at is not None and tracker.reached_step is not None:
                out["time_to_target_s"] = max(0.0, tracker.reached_at - tracker.first_start)
                out["steps_to_target"] = float(tracker.reached_step + 1)
        if tracker.smoothed is not None:
            out["final_loss"] = tracker.smoothed
        try:
            summary = store.summary(plan.name)
        except UnknownJobError:
            return out
        by_size = {t.world_size: t for t in summary.throughput}
        stat = by_size.get(plan.limits.num) or by_size.get(summary.world_size)
        if stat is not None and stat.aggregate_examples_per_second > 0:
            out["samples_per_s"] = stat.aggregate_examples_per_second
            out["world_size"] = float(stat.world_size)
        return out


class YarnJobRunner(JobRunner):
    """Jobs through the ResourceManager's services API, as ``submarine job run|show|kill`` do."""

    def __init__(self, rm_url: str, *, kill_timeout_s: float = 120.0) -> None:
        """Raises:
        ValueError: ``rm_url`` is not an http(s) URL.
        """
        self._yarn = YarnServiceClient(rm_url, poll_interval=0.5)
        self._kill_timeout = kill_timeout_s

    def submit(self, request: JobRequest) -> None:
        """Submit (replacing a job of that name left by an interrupted run); see :meth:`JobRunner.submit`.

        Raises:
            BackendError: the spec is invalid or the RM refused it.
        """
        try:
            submit(self._yarn, request, replace=True)
        except (JobSpecError, YarnError) as exc:
            raise BackendError(f"cannot submit job {request.name}: {exc}") from exc

    def state(self, name: str) -> JobState:
        """See :meth:`JobRunner.state`.

        Raises:
            BackendError: the RM cannot be asked.
        """
        try:
            status = self._yarn.status(name)
        except ServiceNotFoundError:
            return JobState(True, False, f"job {name} is gone from the ResourceManager")
        except YarnError as exc:
            raise BackendError(f"cannot read the state of job {name}: {exc}") from exc
        detail = status.describe() + (f": {status.diagnostics}" if status.diagnostics else "")
        return JobState(status.is_terminal, status.state in _CLEAN_END, detail)

    def describe(self, name: str) -> str:
        """The job's YARN state and, while it runs, its driver's view of the ring. Never raises."""
        try:
            status = self._yarn.status(name)
        except YarnError as exc:
            return f"job {name}: {exc}"
        line = status.describe() + (f": {status.diagnostics}" if status.diagnostics else "")
        if status.is_terminal:
            return line
        try:
            with JobClient(name, self._yarn, timeout=3.0, locate_timeout=0.0) as job:
                ring = job.status()
        except (DriverUnreachableError, OSError, ValueError) as exc:
            return f"{line}; driver not reachable: {exc}"
        return f"{line}; driver {JobPhase.from_wire(ring.phase)}: ring of {ring.world_size}, target {ring.target}"

    def kill(self, name: str) -> None:
        """Destroy the job's service and forget its control token; see :meth:`JobRunner.kill`.

        Raises:
            BackendError: the RM could not remove it within the kill timeout.
        """
        try:
            self._yarn.destroy(name, missing_ok=True, timeout=self._kill_timeout)
        except YarnError as exc:
            raise BackendError(f"cannot remove job {name}: {exc}") from exc
        try:
            forget_job(name)
        except OSError as exc:
            raise BackendError(f"job {name} is gone but its token files stay: {exc}") from exc

    def close(self) -> None:
        self._yarn.close()


def resolve_rm_url(explicit: str | None = None, *, cluster: LocalCluster | None = None, probe: bool = True) -> str:
    """The ResourceManager the jobs go to: ``explicit``, else ``SUBMARINE_RM_URL``, else the running local
    pseudo-cluster's. With ``probe``, asks it for its version (one request, a few seconds at most).

    Raises:
        BackendError: none is given and no pseudo-cluster runs, or the RM does not answer.
    """
    url = explicit or env.settings().rm_url
    if not url:
        cluster = cluster or LocalCluster()
        try:
            spec = cluster.spec()
        except ClusterError as exc:
            raise BackendError(
                "the pseudo-cluster backend needs a ResourceManager: set SUBMARINE_RM_URL or start the "
                f"pseudo-cluster with `submarine cluster up` ({exc})"
            ) from exc
        if not cluster.running_daemons():
            raise BackendError(
                f"the pseudo-cluster recorded in {cluster.dir} is not running: start it with `submarine cluster up` "
                "or set SUBMARINE_RM_URL"
            )
        url = spec.rm_url
    if probe:
        try:
            with YarnServiceClient(url, timeout=5.0, retries=1) as yarn:
                yarn.hadoop_version()
        except ValueError as exc:
            raise BackendError(f"the pseudo-cluster backend: {exc}") from exc
        except YarnError as exc:
            raise BackendError(f"no ResourceManager answers at {url}: {exc}") from exc
    return url


def _describe(point: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.values.items())


def _int(s: Mapping[str, Value], key: str, default: int) -> int:
    value = s.get(key, default)
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{key} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    return int(number)


def _float(s: Mapping[str, Value], key: str) -> float:
    value = s[key]
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {value!r}") from None


def _flag(s: Mapping[str, Value], key: str, default: bool) -> bool:
    value = s.get(key, default)
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "yes", "1", "elastic"):
        return True
    if text in ("false", "no", "0", "fixed"):
        return False
    raise ValueError(f"{key} must be true/false (or elastic/fixed), got {value!r}")
