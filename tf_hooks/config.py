"""Where the hooks report to, read from arguments or from the environment the job spec sets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from submarine_elastic import env
from submarine_elastic.limits import INSTANCE, JOB_NAME, MAX_POINTS_PER_BATCH
from tf_hooks.api import MetricsConfigError
from tf_hooks.tensorboard import run_directory

if TYPE_CHECKING:
    from tf_hooks.api import MetricsSink, NoiseSource


class ConnectionOptions(TypedDict, total=False):
    """Where and how a hook reports: :meth:`MetricsConfig.from_env`'s keywords, which both hooks take too.

    The first seven left out (or None) are read from the environment (``submarine_elastic.env``); the
    others (the tuning of :class:`MetricsConfig`) keep its defaults. ``tls_ca`` is a PEM file's path;
    ``tensorboard_dir`` the job's TensorBoard directory, where rank 0's steps are written too.
    """

    endpoint: str | None
    job_id: str | None
    instance: str | None
    token: str | None
    tls_ca: str | Path | None
    every_n: int | None
    tensorboard_dir: str | Path | None
    queue_size: int
    max_stream_points: int
    max_batch_points: int
    flush_interval: float
    rpc_timeout: float
    backoff_initial: float
    backoff_max: float
    close_timeout: float


#: The options read from the environment when left out; the others tune :class:`MetricsConfig`.
_FROM_ENV = frozenset({"endpoint", "job_id", "instance", "token", "tls_ca", "every_n", "tensorboard_dir"})


class ReportingOptions(ConnectionOptions, total=False):
    """Every setting the Keras callback and the SessionRunHook share, as keywords of either.

    ``batch_size`` (this worker's) gives examples per second; ``rank`` and ``world_size`` default to
    Horovod's when it is initialized, else 0 and 1; each may be a number or a callable read on every
    report. ``sink`` replaces the gRPC sender (a :class:`~tf_hooks.api.NullSink` to report nothing).
    ``gradient_noise`` (a :class:`tf_hooks.noise.GradientNoiseScale`, or anything with its
    ``record_fields``) is read off the training thread and its estimate reported with the steps.
    """

    batch_size: int | Callable[[], int] | None
    rank: int | Callable[[], int] | None
    world_size: int | Callable[[], int] | None
    sink: MetricsSink | None
    gradient_noise: NoiseSource | None


@dataclass(frozen=True)
class MetricsConfig:
    """Everything a sink needs. ``endpoint`` None means: report nothing (a :class:`NullSink`).

    The tuning fields bound memory (``queue_size`` steps handed over and not yet taken in by the
    sender, ``queue_size`` queued, ``max_stream_points`` in flight) and time (``rpc_timeout`` per
    stream, ``close_timeout`` at the end of training). A stream goes out every ``flush_interval``
    seconds, or as soon as ``max_stream_points`` steps wait, in batches of ``max_batch_points``
    (the service takes at most ``MAX_POINTS_PER_BATCH`` a batch), fewer where a batch would pass the
    ``MAX_REPORT_MESSAGE_BYTES`` the service receives (steps with many user metrics), and at most
    ``MAX_ACK_KEYS`` incarnations a stream. ``tensorboard_dir`` (None: none) is where rank 0's steps are
    also written as TensorBoard scalars (``tf_hooks.tensorboard``), whether or not there is an endpoint.
    """

    endpoint: str | None = None
    job_id: str | None = None
    instance: str = "worker"
    token: str | None = None
    tls: bool = False
    tls_ca: bytes | None = None
    every_n: int = 1
    tensorboard_dir: Path | None = None
    queue_size: int = 10_000
    max_stream_points: int = 4096
    max_batch_points: int = 4096
    flush_interval: float = 1.0
    rpc_timeout: float = 10.0
    backoff_initial: float = 0.1
    backoff_max: float = 2.0
    close_timeout: float = 5.0

    def __post_init__(self) -> None:
        """Raises:
        MetricsConfigError: naming the first unusable setting.
        """
        if self.endpoint is not None:
            if not self.endpoint.strip():
                raise MetricsConfigError("the metrics endpoint is empty; expected host:port")
            if self.job_id is None:
                raise MetricsConfigError(
                    f"a metrics endpoint is set ({self.endpoint}) but no job id; pass job_id= or set SUBMARINE_JOB_ID"
                )
        if self.job_id is not None and (problem := JOB_NAME.problem(self.job_id)) is not None:
            raise MetricsConfigError(f"job id: {problem}")
        if (problem := INSTANCE.problem(self.instance)) is not None:
            raise MetricsConfigError(problem)
        if self.token is not None and (
            not self.token or not self.token.isascii() or not self.token.isprintable() or " " in self.token
        ):
            raise MetricsConfigError("the metrics token must be non-empty printable ASCII without spaces")
        for name in ("every_n", "queue_size", "max_stream_points", "max_batch_points"):
            if getattr(self, name) < 1:
                raise MetricsConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_batch_points > MAX_POINTS_PER_BATCH:
            raise MetricsConfigError(
                f"max_batch_points must be at most {MAX_POINTS_PER_BATCH} (the service's limit), "
                f"got {self.max_batch_points}"
            )
        for name in ("flush_interval", "rpc_timeout", "backoff_initial", "backoff_max"):
            if not getattr(self, name) > 0:
                raise MetricsConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.close_timeout < 0:
            raise MetricsConfigError(f"close_timeout must be >= 0, got {self.close_timeout}")

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None

    @classmethod
    def from_env(cls, **options: Unpack[ConnectionOptions]) -> MetricsConfig:
        """Arguments win; each one left None is read from its variable in ``submarine_elastic.env``.

        Reads the token and CA files named there (small local files).

        Raises:
            MetricsConfigError: a setting is unusable, a variable is malformed, a file cannot be read,
                or an option that does not exist.
        """
        unknown = set(options) - set(ConnectionOptions.__optional_keys__)
        if unknown:
            raise MetricsConfigError(f"unknown metrics setting(s): {', '.join(sorted(unknown))}")
        endpoint, job_id, instance = options.get("endpoint"), options.get("job_id"), options.get("instance")
        token, tls_ca, every_n = options.get("token"), options.get("tls_ca"), options.get("every_n")
        tensorboard = options.get("tensorboard_dir")
        tuning = {name: value for name, value in options.items() if name not in _FROM_ENV and value is not None}
        settings = env.settings()
        try:
            every = every_n if every_n is not None else settings.metrics_every_n
        except ValueError as e:
            raise MetricsConfigError(str(e)) from None
        if token is None:
            try:
                token = settings.read_metrics_token()
            except env.SecretFileError as e:
                raise MetricsConfigError(str(e)) from None
        ca_path = Path(tls_ca) if tls_ca is not None else settings.metrics_tls_ca
        ca = _read(ca_path, "the TLS CA file") if ca_path is not None else None
        return cls(
            endpoint=endpoint if endpoint is not None else settings.metrics_endpoint,
            job_id=job_id if job_id is not None else settings.job_id,
            instance=instance if instance is not None else settings.instance(),
            token=token,
            tls=ca is not None or settings.metrics_tls_on(),
            tls_ca=ca,
            every_n=every,
            tensorboard_dir=run_directory(tensorboard if tensorboard is not None else settings.tensorboard_dir),
            **tuning,  # type: ignore[arg-type]
        )


#: The options only the hooks take (the rest make their :class:`MetricsConfig`).
HOOK_ONLY_OPTIONS = ReportingOptions.__optional_keys__ - ConnectionOptions.__optional_keys__


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise MetricsConfigError(f"cannot read {what} {path}: {e}") from None
