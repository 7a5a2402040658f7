"""``submarine metrics serve``: run the metrics service the training hooks report to."""

from __future__ import annotations

import ipaddress
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from submarine_elastic import env
from submarine_elastic.metrics.api import DEFAULT_PORT, MAX_JOBS, MetricsError
from submarine_elastic.metrics.auth import CredentialError, job_credential
from submarine_elastic.metrics.server import MetricsServer, TlsCredentials
from submarine_elastic.metrics.store import InMemoryStore

_file = click.Path(exists=True, dir_okay=False, path_type=Path)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token(token_file: Path | None) -> str | None:
    try:
        return env.read_secret(token_file, "the metrics token") if token_file else env.metrics_token()
    except env.SecretFileError as exc:
        raise click.ClickException(str(exc)) from exc


def _key(job_key_file: Path) -> bytes:
    try:
        return env.read_secret(job_key_file, "the metrics service key").encode()
    except env.SecretFileError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group()
def metrics() -> None:
    """Run the metrics service that training processes report to."""


@metrics.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: all).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True, help="gRPC port; 0 picks one."
)
@click.option(
    "--token-file",
    type=_file,
    default=None,
    help="File holding the bearer token callers must send "
    "[default: $SUBMARINE_METRICS_TOKEN, else the file in $SUBMARINE_METRICS_TOKEN_FILE].",
)
@click.option(
    "--job-key-file",
    type=_file,
    default=None,
    help="File holding the service key: the service then also takes each job's own credential "
    "(`submarine metrics credential JOB`), which reports and reads that job only.",
)
@click.option(
    "--allow-unauthenticated",
    is_flag=True,
    help="Serve without a token on an address other than loopback (a trusted network only).",
)
@click.option("--tls-cert", type=_file, default=None, help="PEM certificate chain; with --tls-key, serve TLS.")
@click.option("--tls-key", type=_file, default=None, help="PEM private key of --tls-cert.")
@click.option(
    "--prometheus-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also serve Prometheus metrics over HTTP on this port (0 picks one) [default: off].",
)
@click.option("--prometheus-host", default=None, help="Address of the Prometheus endpoint [default: --host].")
@click.option("--max-jobs", type=click.IntRange(1, MAX_JOBS), default=256, show_default=True, help="Jobs kept (LRU).")
@click.option(
    "--points-per-job", type=click.IntRange(min=1), default=4096, show_default=True, help="Recent points kept per job."
)
def serve(
    host: str,
    port: int,
    token_file: Path | None,
    job_key_file: Path | None,
    allow_unauthenticated: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    prometheus_port: int | None,
    prometheus_host: str | None,
    max_jobs: int,
    points_per_job: int,
) -> None:
    """Serve the metrics service until interrupted (Ctrl-C or SIGTERM).

    Prints the gRPC address (and the Prometheus URL) once listening.
    """
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    token = _token(token_file)
    key = _key(job_key_file) if job_key_file else None
    if token is None and key is None and not _is_loopback(host) and not allow_unauthenticated:
        raise click.UsageError(
            f"no token for a service on {host}: set SUBMARINE_METRICS_TOKEN, pass --token-file or --job-key-file, "
            "or pass --allow-unauthenticated on a trusted network"
        )
    try:
        tls = TlsCredentials.from_files(tls_cert, tls_key) if tls_cert and tls_key else None
        server = MetricsServer(
            InMemoryStore(max_jobs=max_jobs, points_per_job=points_per_job),
            host=host,
            port=port,
            token=token,
            job_key=key,
            tls=tls,
            prometheus_port=prometheus_port,
            prometheus_host=prometheus_host,
        ).start()
    except (MetricsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    click.echo(
        f"metrics service listening on {host}:{server.port} "
        f"({'TLS' if tls else 'plaintext'}, {'token required' if token else 'no token'}"
        f"{', job credentials' if key else ''})"
    )
    if server.prometheus_port is not None:
        click.echo(f"Prometheus metrics at http://{prometheus_host or host}:{server.prometheus_port}/metrics")
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop(grace=2.0)
    click.echo("metrics service stopped")


@metrics.command()
@click.argument("job")
@click.option("--job-key-file", type=_file, required=True, help="The service key `metrics serve` was given.")
def credential(job: str, job_key_file: Path) -> None:
    """Print JOB's own metrics credential: it reports and reads JOB's metrics only.

    Hand it to the job as SUBMARINE_METRICS_TOKEN (``submarine job run`` does so for a job the controller
    manages). The same key and job always give the same credential.
    """
    try:
        click.echo(job_credential(_key(job_key_file), job))
    except CredentialError as exc:
        raise click.ClickException(str(exc)) from exc
