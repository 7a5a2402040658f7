"""``submarine metrics serve``: run the metrics service the training hooks report to."""

from __future__ import annotations

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
from submarine_elastic.netif import is_loopback
from submarine_elastic.tls import TlsError

_file = click.Path(exists=True, dir_okay=False, path_type=Path)


def _token(token_file: Path | None) -> str | None:
    try:
        return env.read_secret(token_file, "the metrics token") if token_file else env.settings().read_metrics_token()
    except env.SecretFileError as exc:
        raise click.ClickException(str(exc)) from exc


def _key(job_key_file: Path) -> bytes:
    try:
        return env.read_secret(job_key_file, "the metrics service key").encode()
    except env.SecretFileError as exc:
        raise click.ClickException(str(exc)) from exc


def _server_tls(
    host: str,
    insecure: bool | None,
    cert: Path | None,
    key: Path | None,
    client_ca: Path | None,
    no_client_cert: bool,
) -> TlsCredentials | None:
    """The service's TLS: the given certificate, else one the cluster's CA issues for ``host`` and
    loopback; client certificates of ``client_ca`` (default: the cluster's CA) required unless
    ``no_client_cert``. None (plaintext) only when asked for, and on loopback.

    Raises:
        click.UsageError: plaintext asked for beyond loopback, or with TLS options.
        TlsError, OSError, ValueError: the cluster's CA or a file cannot be read.
    """
    plaintext = env.settings().insecure if insecure is None else insecure
    if plaintext:
        if cert is not None or client_ca is not None:
            raise click.UsageError("--insecure serves plaintext: it takes no --tls-cert or --tls-client-ca")
        if not is_loopback(host):
            raise click.UsageError(
                f"--insecure on {host}: plaintext is served on loopback only (tokens would cross the network "
                "in the clear); drop --insecure to serve TLS"
            )
        return None
    from submarine_elastic.tls import cluster_ca, loopback_hosts

    if cert is not None and key is not None:
        chain, private = cert.read_bytes(), key.read_bytes()
    else:
        issued = cluster_ca().issue_server("submarine-elastic metrics", loopback_hosts(host))
        chain, private = issued.cert, issued.key
    trusted = None if no_client_cert else client_ca.read_bytes() if client_ca is not None else cluster_ca().cert_pem
    return TlsCredentials(chain, private, client_ca=trusted)


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
@click.option(
    "--tls-cert",
    type=_file,
    default=None,
    help="PEM certificate chain, with --tls-key [default: one of the cluster's CA, issued for --host and loopback].",
)
@click.option("--tls-key", type=_file, default=None, help="PEM private key of --tls-cert.")
@click.option(
    "--tls-client-ca",
    type=_file,
    default=None,
    help="Callers must present a certificate of this CA (PEM) [default: the cluster's CA].",
)
@click.option(
    "--no-client-cert",
    is_flag=True,
    help="TLS without client certificates: callers are told apart by their token alone.",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Plaintext, on loopback only [default: SUBMARINE_INSECURE].",
)
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
    tls_client_ca: Path | None,
    no_client_cert: bool,
    insecure: bool | None,
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
    if token is None and key is None and not is_loopback(host) and not allow_unauthenticated:
        raise click.UsageError(
            f"no token for a service on {host}: set SUBMARINE_METRICS_TOKEN, pass --token-file or --job-key-file, "
            "or pass --allow-unauthenticated on a trusted network"
        )
    try:
        tls = _server_tls(host, insecure, tls_cert, tls_key, tls_client_ca, no_client_cert)
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
    except (MetricsError, ValueError, TlsError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    click.echo(
        f"metrics service listening on {host}:{server.port} "
        f"({'plaintext' if tls is None else 'mutual TLS' if tls.client_ca else 'TLS'}, "
        f"{'token required' if token else 'no token'}"
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
