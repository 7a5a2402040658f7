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

from submarine_elastic.bridge.api import DEFAULT_JAVA_PORT, DEFAULT_PYTHON_PORT, BridgeError, check_token
from submarine_elastic.bridge.server import BridgeServer
from submarine_elastic.controller.api import Controller, ControllerError
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController


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
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (plain TCP: keep it local).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PYTHON_PORT,
    show_default=True,
    help="Port the JVM calls (its ClientServer's pythonPort); 0 picks one.",
)
@click.option("--java-host", default="127.0.0.1", show_default=True, help="Address of the JVM's ClientServer.")
@click.option(
    "--java-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_JAVA_PORT,
    show_default=True,
    help="Port of the JVM's ClientServer (its javaPort); the bridge releases returned objects there.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="File holding the token both ends pass to py4j (16+ characters of [A-Za-z0-9._~+/=-]).",
)
@click.option("--create-token", is_flag=True, help="Write a new random token to --token-file if it does not exist.")
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
    controller_name: str,
) -> None:
    """Serve org.submarineelastic.bridge.ElasticScheduler to a JVM until interrupted (Ctrl-C or SIGTERM).

    Prints the address once listening. The token is read from a file and never printed or logged.
    """
    token = _read_token(token_file, create_token)
    controller: Controller = _CONTROLLERS[controller_name]()
    try:
        server = BridgeServer(
            controller, token=token, host=host, python_port=port, java_host=java_host, java_port=java_port
        ).start()
    except BridgeError as exc:
        if isinstance(controller, ControllerClient):
            controller.close()
        raise click.ClickException(str(exc)) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    click.echo(
        f"py4j bridge listening on {host}:{server.port} (JVM ClientServer expected on {java_host}:{java_port}; "
        f"controller: {controller_name}; token from {token_file})"
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
