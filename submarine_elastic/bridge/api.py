"""The py4j bridge's interface: errors, defaults, where the Java side's files are, and how controller
values become Java values.

The Java interface a JVM caller programs against is ``org.submarineelastic.bridge.ElasticScheduler``;
its sources live under :func:`java_sources` (six small files, Java 8 compatible). A JVM compiles them
with the py4j jar the ``py4j`` wheel ships (:func:`py4j_jar`) and reaches the Python side through
py4j's ``ClientServer``: Java calls into Python on the *Python port*, and the Python side calls back
into the JVM (to build the returned ``Job`` / ``Decision`` objects and exceptions, and to release them
later) over the same connection. py4j's configuration names a *Java port* too (where the JVM listens);
the bridge never connects there. Both ends must agree on the auth token, and on TLS (:class:`BridgeTls`).
"""

from __future__ import annotations

import re
import ssl
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submarine_elastic.controller.api import DecisionRecord, JobRecord

#: Java package of the interface, its value classes and its exceptions.
JAVA_PACKAGE = "org.submarineelastic.bridge"
#: The interface the Python side implements.
JAVA_INTERFACE = f"{JAVA_PACKAGE}.ElasticScheduler"
#: py4j's own defaults: the JVM's ``ClientServer`` listens on the Java port, the bridge on the Python port.
DEFAULT_JAVA_PORT = 25333
DEFAULT_PYTHON_PORT = 25334
#: What a token may hold: py4j sends it as one protocol line, and Java escapes some characters Python
#: does not unescape, so only characters both sides pass through unchanged are allowed.
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")

#: Connections that passed the login, served at once (py4j gives each calling JVM thread its own); one
#: more login is answered by closing its connection.
MAX_CONNECTIONS = 64
#: Connections not yet logged in, held at once; one more is closed as soon as it is accepted. The bridge
#: runs one thread per connection, so these two bound its threads.
MAX_PENDING_CONNECTIONS = 16
#: Seconds a new connection has to finish its TLS handshake and log in before it is closed.
LOGIN_TIMEOUT_S = 5.0
#: Seconds a logged-in connection may stay silent (between calls, or within one) before it is closed;
#: the JVM opens a new one on its next call.
IDLE_TIMEOUT_S = 300.0
#: Longest protocol line read from a connection, in bytes (newline included); a longer one closes it.
MAX_LINE_BYTES = 64 * 1024
#: Most arguments one call may carry (the interface's widest method takes 5); more closes the connection.
MAX_ARGUMENTS = 8
#: At most one log line per this many seconds for each kind of refusal (wrong token, connection over a
#: bound, member outside the interface), giving how many were refused since the last line.
REFUSAL_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True)
class BridgeLimits:
    """The bounds of one bridge (defaults: the constants above, stated in docs/security.md).

    Raises:
        BridgeConfigError: a count below 1 or a time not above 0 (named).
    """

    max_connections: int = MAX_CONNECTIONS
    max_pending: int = MAX_PENDING_CONNECTIONS
    login_timeout_s: float = LOGIN_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    refusal_log_interval_s: float = REFUSAL_LOG_INTERVAL_S

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_pending"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BridgeConfigError(f"{name} must be an integer of at least 1, got {value!r}")
        for name in ("login_timeout_s", "idle_timeout_s", "refusal_log_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise BridgeConfigError(f"{name} must be a number of seconds above 0, got {value!r}")


@dataclass(frozen=True)
class BridgeTls:
    """TLS on the bridge's port: the one socket a JVM and the bridge talk over (the bridge never connects
    to the JVM's port, whose server py4j's ``ClientServer`` cannot put on TLS).

    Attributes:
        context: a server context (``ssl.PROTOCOL_TLS_SERVER``) with the bridge's certificate; with
            ``verify_mode = CERT_REQUIRED`` (what :meth:`from_files` builds) a JVM must also present a
            client certificate of the CA before it may send its token.
    """

    context: ssl.SSLContext

    @classmethod
    def from_files(cls, cert: Path, key: Path, ca: Path) -> BridgeTls:
        """Mutual TLS (1.2 at least): the bridge's certificate and key (PEM), and the CA (PEM) whose
        client certificate a JVM must present.

        Raises:
            BridgeConfigError: a file cannot be read or holds no usable certificate or key (named).
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(cert, key)
            context.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as exc:
            raise BridgeConfigError(f"cannot load the bridge's TLS files ({cert}, {key}, {ca}): {exc}") from exc
        return cls(context)

    def __post_init__(self) -> None:
        if not isinstance(self.context, ssl.SSLContext) or self.context.protocol != ssl.PROTOCOL_TLS_SERVER:
            raise BridgeConfigError("BridgeTls.context must be an ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)")


class BridgeError(Exception):
    """Base of every error raised by :mod:`submarine_elastic.bridge`."""


class BridgeConfigError(BridgeError, ValueError):
    """A bad argument (port, address, token); the message names it, and never shows a token."""


class BridgeStartError(BridgeError):
    """The bridge could not listen (port taken, address not local to this host)."""


class JavaFilesNotFoundError(BridgeError, FileNotFoundError):
    """The py4j jar or the interface's Java sources are not where they should be."""


def check_token(token: object) -> str:
    """``token`` if it is usable as a bridge token.

    Raises:
        BridgeConfigError: not a string of 16 to 512 characters from ``[A-Za-z0-9._~+/=-]``; the
            message gives its length, never its value.
    """
    if not isinstance(token, str) or not TOKEN_PATTERN.fullmatch(token):
        length = f"{len(token)} characters" if isinstance(token, str) else type(token).__name__
        raise BridgeConfigError(
            f"the bridge token must be 16 to 512 characters from [A-Za-z0-9._~+/=-] (got {length}); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def java_sources() -> Path:
    """Root of the Java sources (``org/submarineelastic/bridge/*.java`` below it).

    Raises:
        JavaFilesNotFoundError: the sources are not installed beside this module (a wheel built
            without them).
    """
    root = Path(__file__).resolve().parent / "java"
    if not (root / Path(*JAVA_PACKAGE.split(".")) / "ElasticScheduler.java").is_file():
        raise JavaFilesNotFoundError(f"the bridge's Java sources are missing under {root}")
    return root


def py4j_jar() -> Path:
    """The py4j jar matching the installed ``py4j`` module (the wheel ships it under ``share/py4j``).

    Raises:
        JavaFilesNotFoundError: py4j is installed without its jar.
    """
    from py4j.java_gateway import find_jar_path

    found = find_jar_path()
    if not found or not Path(found).is_file():
        raise JavaFilesNotFoundError("py4j's jar was not found (looked under sys.prefix/share/py4j and beside py4j)")
    return Path(found)


class JavaSide(ABC):
    """Builds the Java values a JVM caller receives. The py4j implementation calls into the JVM on the
    calling thread's own connection; the unit tests use a recording fake.
    """

    @abstractmethod
    def job(self, record: JobRecord) -> Any:
        """A ``Job`` for ``record``."""

    @abstractmethod
    def job_list(self, records: list[JobRecord]) -> Any:
        """A ``java.util.List<Job>`` of ``records``, in order."""

    @abstractmethod
    def decision(self, record: DecisionRecord) -> Any:
        """A ``Decision`` for ``record``."""

    @abstractmethod
    def error(self, kind: str, message: str) -> BaseException:
        """A Python exception that makes py4j throw a Java exception of class ``kind`` (one of
        ``ElasticSchedulerException``, ``UnknownJobException``, ``InvalidJobException``) with ``message``
        in the calling JVM thread.
        """
