"""Serve a controller to JVM callers through py4j's ``ClientServer``.

Start it from Python::

    with BridgeServer(controller, token=token, python_port=0).start() as bridge:
        ...  # a JVM connects to bridge.port with the same token

or with ``submarine bridge serve``. The JVM side builds its own ``ClientServer`` with the same token,
``pythonPort`` = :attr:`BridgeServer.port` and ``javaPort`` = the ``java_port`` given here (see
``ElasticScheduler.java``).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from py4j.clientserver import SHUTDOWN_FINALIZER_WORKER, ClientServer, JavaParameters, PythonParameters
from py4j.java_gateway import server_started
from py4j.protocol import Py4JError

from submarine_elastic.bridge.api import (
    DEFAULT_JAVA_PORT,
    DEFAULT_PYTHON_PORT,
    BridgeConfigError,
    BridgeError,
    BridgeLimits,
    BridgeStartError,
    BridgeTls,
    check_token,
)
from submarine_elastic.bridge.service import ElasticSchedulerService, JavaExceptionRaised, Py4JJavaSide
from submarine_elastic.bridge.wire import Guard, GuardedClientServer
from submarine_elastic.controller.api import Controller
from submarine_elastic.netif import is_loopback
from submarine_elastic.tls import CertificateAuthority, CertificateRequestError, loopback_hosts, write_private

_log = logging.getLogger(__name__)

#: The loggers py4j writes to; the bridge filters both (see :class:`_Py4JLogFilter`).
_PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
#: Seconds py4j's accept thread may take to start listening.
_LISTEN_TIMEOUT = 10.0


#: The files :func:`write_tls_files` writes: the bridge's certificate and key, the JVM's, and the CA's certificate.
TLS_FILES = ("bridge.crt", "bridge.key", "jvm.crt", "jvm.key", "ca.crt")


def write_tls_files(directory: Path, ca: CertificateAuthority, host: str) -> BridgeTls:
    """Issue from ``ca`` the bridge's server certificate (naming ``host`` and loopback) and a client
    certificate for the JVM, write them with their keys and the CA's certificate into ``directory`` (made
    mode 0700; keys mode 0600), and return the bridge's mutual TLS. The JVM loads ``jvm.crt``,
    ``jvm.key`` and ``ca.crt`` into the socket factory of its ``ClientServer``.

    Raises:
        BridgeConfigError: the directory or a file cannot be written, or ``host`` cannot be named in a
            certificate (named).
    """
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)
        ca.issue_server("submarine-elastic py4j bridge", loopback_hosts(host)).write(directory, "bridge")
        ca.issue_client("submarine-elastic bridge JVM").write(directory, "jvm")
        write_private(directory / "ca.crt", ca.cert_pem, mode=0o644)
    except OSError as exc:
        raise BridgeConfigError(f"cannot write the bridge's TLS files in {directory}: {exc.strerror or exc}") from exc
    except CertificateRequestError as exc:
        raise BridgeConfigError(str(exc)) from exc
    return BridgeTls.from_files(directory / "bridge.crt", directory / "bridge.key", directory / "ca.crt")


class _Py4JLogFilter(logging.Filter):
    """Keeps the token out of py4j's debug log (it logs every command it sends, the auth command
    included) and drops py4j's traceback for exceptions the bridge raised on purpose for the caller.
    """

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], JavaExceptionRaised):
            return False
        message = record.getMessage()
        if self._token in message:
            record.msg = message.replace(self._token, "***")
            record.args = None
        return True


class BridgeServer:
    """The Python end of the py4j bridge: a ``ClientServer`` whose entry point is an
    :class:`ElasticSchedulerService` over ``controller``.

    Args:
        controller: the controller every call goes to (thread-safe: JVM threads call concurrently).
        token: the shared secret both ends pass to py4j (``auth_token``); a JVM with another token is
            refused. It is never logged.
        host: address the bridge listens on (loopback by default). Any other address needs ``tls`` or
            ``insecure``.
        python_port: port the bridge listens on; 0 picks a free one (see :attr:`port`).
        java_host, java_port: where the JVM caller's ``ClientServer`` listens (py4j's client-side
            settings). The bridge never connects there: it builds the values it returns, and releases
            them, over the calling JVM thread's own connection, so neither the token nor a call crosses
            a connection the bridge opened.
        tls: TLS on the bridge's port (see :class:`BridgeTls`); without it py4j speaks plain TCP.
        insecure: allow plain TCP beyond loopback, where the token and every call cross the network
            readable by anyone on the path. Never implied.
        limits: the bridge's bounds (connections, timeouts, refusal logging); the defaults are stated in
            docs/security.md.

    Raises:
        BridgeConfigError: a bad token, port, address or limit (named, the token never shown); an
            address beyond loopback without ``tls`` or ``insecure``.
    """

    def __init__(
        self,
        controller: Controller,
        *,
        token: str,
        host: str = "127.0.0.1",
        python_port: int = DEFAULT_PYTHON_PORT,
        java_host: str = "127.0.0.1",
        java_port: int = DEFAULT_JAVA_PORT,
        tls: BridgeTls | None = None,
        insecure: bool = False,
        limits: BridgeLimits | None = None,
    ) -> None:
        check_token(token)
        for name, value, low in (("python_port", python_port, 0), ("java_port", java_port, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
                raise BridgeConfigError(f"{name} must be an integer in [{low}, 65535], got {value!r}")
        for name, address in (("host", host), ("java_host", java_host)):
            if not isinstance(address, str) or not address:
                raise BridgeConfigError(f"{name} must be a host name or address, got {address!r}")
        if tls is None and not insecure and not is_loopback(host):
            raise BridgeConfigError(
                f"host {host!r} is not loopback: py4j would carry the token and every call over it in plain "
                "TCP; give the bridge TLS (--tls-dir), keep it on 127.0.0.1, or allow plaintext explicitly "
                "(insecure=True, --insecure)"
            )
        if tls is not None and not isinstance(tls, BridgeTls):
            raise BridgeConfigError(f"tls must be a BridgeTls, got {type(tls).__name__}")
        if limits is not None and not isinstance(limits, BridgeLimits):
            raise BridgeConfigError(f"limits must be a BridgeLimits, got {type(limits).__name__}")
        self.host = host
        self.java_host = java_host
        self.java_port = java_port
        self._python_port = python_port
        self._token = token
        self.tls = tls
        self.insecure = insecure
        self.limits = limits or BridgeLimits()
        self._java = Py4JJavaSide()
        self.service = ElasticSchedulerService(controller, self._java)
        self.guard = Guard(self.service, token, self.limits)
        self._gateway: ClientServer | None = None
        self._log_filter = _Py4JLogFilter(token)

    @property
    def port(self) -> int:
        """The port the bridge listens on (the one picked, when started with port 0).

        Raises:
            BridgeError: not started.
        """
        server = self._gateway.get_callback_server() if self._gateway is not None else None
        if server is None:
            raise BridgeError("the bridge is not started")
        return int(server.get_listening_port())

    @property
    def running(self) -> bool:
        """Whether the bridge is listening."""
        return self._gateway is not None

    def start(self) -> BridgeServer:
        """Listen for JVM callers. Returns once the port accepts connections (py4j serves on its own
        threads); blocks at most a few seconds.

        Raises:
            BridgeStartError: the port is taken or the address is not local to this host.
            BridgeError: already started.
        """
        if self._gateway is not None:
            raise BridgeError("the bridge is already started")
        if self.tls is None and not is_loopback(self.host):
            _log.warning(
                "the py4j bridge listens on %s in plain TCP (insecure): the token and every call cross the "
                "network unencrypted",
                self.host,
            )
        for name in _PY4J_LOGGERS:
            logging.getLogger(name).addFilter(self._log_filter)
        # No entry point in py4j's pool: the guarded connections dispatch to the service themselves, so
        # nothing of the service is reachable through py4j's own call handling.
        gateway = GuardedClientServer(
            self.guard,
            java_parameters=JavaParameters(
                address=self.java_host,
                port=self.java_port,
                auth_token=self._token,
                auto_convert=False,
                # No finalizers: the Java side releases what it built explicitly, on the calling connection.
                enable_memory_management=False,
            ),
            python_parameters=PythonParameters(
                address=self.host,
                port=self._python_port,
                auth_token=self._token,
                propagate_java_exceptions=True,
                eager_load=False,
                daemonize=True,
                daemonize_connections=True,
                ssl_context=self.tls.context if self.tls else None,
            ),
        )
        self._java.attach(gateway)
        # py4j binds in start_callback_server() but listens on its accept thread: wait for that.
        listening = threading.Event()

        def on_started(signal: Any, sender: Any, server: Any = None, **params: Any) -> None:
            if server is gateway.get_callback_server():
                listening.set()

        server_started.connect(on_started, unique_id=id(listening))
        try:
            gateway.start_callback_server()
            if not listening.wait(_LISTEN_TIMEOUT):
                gateway.shutdown()
                raise BridgeStartError(f"the py4j bridge did not listen within {_LISTEN_TIMEOUT} s")
        except (Py4JError, OSError) as exc:
            self._stop_finalizer(gateway)
            self._remove_log_filter()
            raise BridgeStartError(f"the py4j bridge cannot listen on {self.host}:{self._python_port}: {exc}") from exc
        except BridgeStartError:
            self._stop_finalizer(gateway)
            self._remove_log_filter()
            raise
        finally:
            server_started.disconnect(on_started, unique_id=id(listening))
        self._gateway = gateway
        _log.info(
            "py4j bridge listening on %s:%d; the JVM's ClientServer is expected on %s:%d",
            self.host,
            self.port,
            self.java_host,
            self.java_port,
        )
        return self

    def stop(self) -> None:
        """Close every JVM connection and stop listening. Blocks until py4j's accept thread has ended
        (well under a second). Leaves the JVM's own ``ClientServer`` running; the one object last
        returned on each open connection stays referenced there. Stopping twice is a no-op.
        """
        gateway, self._gateway = self._gateway, None
        if gateway is None:
            return
        gateway.shutdown()
        gateway.close(keep_callback_server=True)
        self._stop_finalizer(gateway)
        self.guard.flush()
        self._remove_log_filter()
        _log.info("py4j bridge stopped")

    @staticmethod
    def _stop_finalizer(gateway: ClientServer) -> None:
        deque: Any = getattr(gateway._gateway_client, "finalizer_deque", None)
        if deque is not None:
            deque.appendleft(SHUTDOWN_FINALIZER_WORKER)

    def _remove_log_filter(self) -> None:
        for name in _PY4J_LOGGERS:
            logging.getLogger(name).removeFilter(self._log_filter)

    def __enter__(self) -> BridgeServer:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
