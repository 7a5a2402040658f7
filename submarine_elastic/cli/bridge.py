"""``submarine bridge serve``: let a JVM caller (Submarine's server, any JVM scheduler) reach the
controller through py4j."""

from __future__ import annotations

import os
import secrets
import signal
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click

from submarine_elastic import env
from submarine_elastic.bridge.api import DEFAULT_JAVA_PORT, DEFAULT_PYTHON_PORT, BridgeError, BridgeTls, check_token
from submarine_elastic.bridge.server import BridgeServer, write_tls_files
from submarine_elastic.controller.api import Controller, ControllerError
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.tls import TlsError, cluster_ca


def _live() -> Controller:
    """The running controller (``submarine controller start``), through its API."""
    try:
        client = ControllerClient.connect()
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    if client is None:
        raise click.ClickException("no controller runs here (start one with `submarine controller start`)")
    try:
        client.jobs()  # answers, and takes the token: a JVM's first call would fail otherwise
    except ControllerError as exc:
        client.close()
        raise click.ClickException(str(exc)) from exc
    return client


#: The controllers ``serve`` can front.
_CONTROLLERS: dict[str, Callable[[], Controller]] = {"memory": InMemoryController, "live": _live}


def _read_token(path: Path, create: bool) -> str:
    if create and not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        except OSError as exc:
            raise click.ClickException(f"cannot create the token file {path}: {exc}") from exc
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            click.echo(f"wrote a new token to {path}", err=True)
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        hint = " (--create-token makes one)" if not create else ""
        raise click.ClickException(f"cannot read the token file {path}: {exc.strerror}{hint}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        click.echo(f"warning: the token file {path} is readable by others (mode {mode & 0o777:o})", err=True)
    try:
        return check_token(token)
    except BridgeError as exc:
        raise click.ClickException(f"{path}: {exc}") from exc


@click.group()
def bridge() -> None:
    """The py4j bridge: a JVM reports jobs and reads the controller's decisions."""


@bridge.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; beyond loopback only with TLS (the default) or --insecure.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PYTHON_PORT,
    show_default=True,
    help="Port the JVM calls (its ClientServer's pythonPort); 0 picks one.",
)
@click.option(
    "--java-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of the JVM's ClientServer (py4j's setting; the bridge never connects there).",
)
@click.option(
    "--java-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_JAVA_PORT,
    show_default=True,
    help="Port of the JVM's ClientServer (its javaPort; the bridge never connects there).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="File holding the token both ends pass to py4j (16+ characters of [A-Za-z0-9._~+/=-]).",
)
@click.option("--create-token", is_flag=True, help="Write a new random token to --token-file if it does not exist.")
@click.option(
    "--tls-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the bridge's certificate and the JVM's client certificate (jvm.crt, jvm.key, ca.crt: the "
    "cluster's CA) are written at each start, mode 0700 [default: bridge-tls beside the token file].",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Plain TCP instead of TLS (also SUBMARINE_INSECURE=1): the token and every call readable on the path.",
)
@click.option(
    "--controller",
    "controller_name",
    type=click.Choice(sorted(_CONTROLLERS)),
    default="memory",
    show_default=True,
    help="What answers the calls: memory records jobs and metrics and decides nothing; live is the running "
    "controller (its API, found through SUBMARINE_CONTROLLER_DIR).",
)
def serve(
    host: str,
    port: int,
    java_host: str,
    java_port: int,
    token_file: Path,
    create_token: bool,
    tls_dir: Path | None,
    insecure: bool | None,
    controller_name: str,
) -> None:
    """Serve org.submarineelastic.bridge.ElasticScheduler to a JVM until interrupted (Ctrl-C or SIGTERM).

    Mutual TLS by default: the bridge's certificate and the JVM's client certificate are issued by the
    cluster's CA (SUBMARINE_CA_DIR) at each start. Prints the address once listening. The token is read
    from a file and never printed or logged.
    """
    token = _read_token(token_file, create_token)
    try:
        plaintext = env.settings().insecure if insecure is None else insecure
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    tls: BridgeTls | None = None
    tls_dir = tls_dir or token_file.parent / "bridge-tls"
    if not plaintext:
        try:
            tls = write_tls_files(tls_dir, cluster_ca(), host)
        except (BridgeError, TlsError) as exc:
            raise click.ClickException(str(exc)) from exc
    controller: Controller = _CONTROLLERS[controller_name]()
    try:
        server = BridgeServer(
            controller,
            token=token,
            host=host,
            python_port=port,
            java_host=java_host,
            java_port=java_port,
            tls=tls,
            insecure=plaintext,
        ).start()
    except BridgeError as exc:
        if isinstance(controller, ControllerClient):
            controller.close()
        raise click.ClickException(str(exc)) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    security = f"TLS; the JVM's certificate, key and CA in {tls_dir}" if tls else "plain TCP (insecure)"
    click.echo(
        f"py4j bridge listening on {host}:{server.port} ({security}; JVM ClientServer expected on "
        f"{java_host}:{java_port}; controller: {controller_name}; token from {token_file})"
    )
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
        if isinstance(controller, ControllerClient):
            controller.close()
    click.echo("py4j bridge stopped")
