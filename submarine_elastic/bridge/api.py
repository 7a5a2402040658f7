"""The py4j bridge's interface: errors, defaults, where the Java side's files are, and how controller
values become Java values.

The Java interface a JVM caller programs against is ``org.submarineelastic.bridge.ElasticScheduler``;
its sources live under :func:`java_sources` (six small files, Java 8 compatible). A JVM compiles them
with the py4j jar the ``py4j`` wheel ships (:func:`py4j_jar`) and reaches the Python side through
py4j's ``ClientServer``: Java calls into Python on the *Python port*, and the Python side calls back
into the JVM (to build the returned ``Job`` / ``Decision`` objects and exceptions, and to release them
later) on the *Java port*. Both ends must agree on both ports and on the auth token.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
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
