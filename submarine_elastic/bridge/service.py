"""The Python implementation of ``org.submarineelastic.bridge.ElasticScheduler``.

:class:`ElasticSchedulerService` is what a JVM caller's proxy calls: each method calls the
:class:`~submarine_elastic.controller.api.Controller` with the arguments py4j decoded (``String``: str,
``int``/``long``: int, ``double``: float, ``boolean``: bool, ``null``: None) and turns the result into
Java values through a :class:`~submarine_elastic.bridge.api.JavaSide`. Controller errors become Java
exceptions the caller can catch by type, with the controller's message.

How py4j carries a Python exception to Java: by default it sends the Python traceback as text and the
JVM throws ``py4j.Py4JException("An exception was raised by the Python Proxy. Return Message:
Traceback ...")``. With ``PythonParameters(propagate_java_exceptions=True)`` a callback that raises
``Py4JJavaError`` makes the JVM throw the Java exception object it carries, as is. The bridge does the
latter: it builds an ``UnknownJobException`` / ``InvalidJobException`` in the calling JVM thread and
raises it wrapped, so ``catch (UnknownJobException e)`` works and ``e.getMessage()`` is, for example,
``no job named 'nope'``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError

from submarine_elastic.bridge.api import JAVA_INTERFACE, JAVA_PACKAGE, BridgeError, JavaSide
from submarine_elastic.controller.api import (
    Controller,
    ControllerError,
    DecisionRecord,
    InvalidJobError,
    JobRecord,
    JobSource,
    UnknownJobError,
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a JVM caller may call: each method of ``ElasticScheduler`` with the Python types of its
#: parameters, one tuple per overload (``String``: str or None, ``int``/``long``: int, ``double``: float,
#: ``boolean``: bool). Nothing else of the service (no attribute, no dunder, nothing private) is reachable.
INTERFACE: dict[str, tuple[tuple[type, ...], ...]] = {
    "jobSubmitted": ((str, int, int, int, bool), (str, int, int, int, bool, str)),
    "jobFinished": ((str,),),
    "reportMetrics": ((str, int, int, float), (str, int, int, float, float)),
    "currentDecision": ((str,),),
    "listJobs": ((),),
}
#: Characters of a refused member's name a message or log line shows.
SHOWN_NAME_CHARS = 64


def shown(name: str) -> str:
    """``name`` quoted for a message, cut to :data:`SHOWN_NAME_CHARS` characters."""
    return repr(name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "...")


def _matches(value: object, kind: type) -> bool:
    if kind is str:
        return value is None or isinstance(value, str)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


class JavaExceptionRaised(Py4JJavaError):
    """Carries a Java exception built for the caller. py4j throws ``java_exception`` in the JVM; the
    bridge's log filter keeps py4j from logging a traceback for it, and ``str()`` needs no JVM call
    (``Py4JJavaError.__str__`` asks the JVM for the stack trace).
    """

    def __init__(self, message: str, java_exception: Any) -> None:
        super().__init__(message, java_exception)

    def __str__(self) -> str:
        return str(self.errmsg)


class ElasticSchedulerService:
    """Serves ``ElasticScheduler`` (see its Javadoc) from a :class:`Controller`.

    py4j calls these methods on one Python thread per calling JVM thread, so they run concurrently;
    the controller must be thread-safe. Each blocks for as long as the controller call (at most a few
    seconds) plus, for the methods that return values, one round trip to the JVM per object built.

    Args:
        controller: where every call goes; jobs submitted here are recorded with ``source="bridge"``.
        java: builds the returned Java values and exceptions.
    """

    class Java:
        implements = [JAVA_INTERFACE]

    def __init__(self, controller: Controller, java: JavaSide) -> None:
        if not isinstance(controller, Controller):
            raise TypeError(
                f"controller must implement submarine_elastic.controller.api.Controller, got {controller!r}"
            )
        if not isinstance(java, JavaSide):
            raise TypeError(f"java must be a JavaSide, got {java!r}")
        self.controller = controller
        self.java = java

    def dispatch(self, method: str, args: list[object]) -> Any:
        """Call ``method`` with ``args`` as a JVM caller asked, if it is one of :data:`INTERFACE` with
        an overload taking exactly these argument types; blocks as long as the method.

        Raises:
            JavaExceptionRaised: (from the Java side) the method's own errors, or an
                ``ElasticSchedulerException`` naming a member outside the interface or arguments no
                overload takes; its message shows no traceback and no path.
        """
        overloads = INTERFACE.get(method)
        if overloads is None:
            raise self.java.error("ElasticSchedulerException", f"{shown(method)} is not a method of {JAVA_INTERFACE}")
        if not any(len(types) == len(args) and all(map(_matches, args, types)) for types in overloads):
            given = ", ".join("null" if a is None else type(a).__name__ for a in args)
            raise self.java.error("ElasticSchedulerException", f"{method} takes no arguments ({given}) of these types")
        return getattr(self, method)(*args)

    # The names and arguments below are the Java interface's.

    def jobSubmitted(
        self, jobId: str, minWorkers: int, maxWorkers: int, workers: int, elastic: bool, queue: str | None = None
    ) -> Any:
        return self._call(
            "jobSubmitted",
            jobId,
            lambda: self.java.job(
                self.controller.job_submitted(
                    jobId, minWorkers, maxWorkers, workers, elastic=elastic, source=JobSource.BRIDGE, queue=queue
                )
            ),
        )

    def jobFinished(self, jobId: str) -> None:
        self._call("jobFinished", jobId, lambda: self.controller.job_finished(jobId))

    def reportMetrics(
        self, jobId: str, worldSize: int, step: int, samplesPerSecond: float, loss: float | None = None
    ) -> None:
        self._call(
            "reportMetrics",
            jobId,
            lambda: self.controller.report_metrics(jobId, worldSize, step, samplesPerSecond, loss),
        )

    def currentDecision(self, jobId: str) -> Any:
        def call() -> Any:
            record = self.controller.decision(jobId)
            return None if record is None else self.java.decision(record)

        return self._call("currentDecision", jobId, call)

    def listJobs(self) -> Any:
        return self._call("listJobs", None, lambda: self.java.job_list(self.controller.jobs()))

    def _call(self, method: str, job_id: object, call: Callable[[], T]) -> T:
        if method != "listJobs" and not isinstance(job_id, str):
            raise self.java.error("InvalidJobException", f"{method}: the job id is null")
        try:
            return call()
        except UnknownJobError as exc:
            _log.info("bridge %s(%r) refused: %s", method, job_id, exc)
            raise self.java.error("UnknownJobException", str(exc)) from exc
        except InvalidJobError as exc:
            _log.info("bridge %s(%r) refused: %s", method, job_id, exc)
            raise self.java.error("InvalidJobException", str(exc)) from exc
        except ControllerError as exc:
            _log.warning("bridge %s(%r) failed: %s", method, job_id, exc)
            raise self.java.error("ElasticSchedulerException", f"{type(exc).__name__}: {exc}") from exc
        except Py4JJavaError:
            raise
        except Exception as exc:
            # A bug here or in the controller: the JVM caller gets a typed exception naming its kind; the
            # traceback and the message (which may hold paths) stay in this process's log.
            _log.exception("bridge %s(%r) failed unexpectedly", method, job_id)
            raise self.java.error(
                "ElasticSchedulerException",
                f"internal error in the scheduler ({type(exc).__name__}); the bridge's log has the details",
            ) from exc


class Py4JJavaSide(JavaSide):
    """Builds Java values through a py4j ``ClientServer``, on the calling thread's connection (py4j pins
    each JVM thread's calls, and the calls back into the JVM they make, to one connection).

    Every Java object py4j creates for Python stays in the JVM until Python releases it. The bridge runs
    py4j without its finalizers (they would release from a thread of their own, over a connection to the
    JVM's port), so this class releases every object explicitly, over the calling thread's connection:
    the helpers right after use, and the object handed to the JVM as a reply when the next reply on the
    same connection replaces it (a reply cannot be released before it was sent).
    """

    def __init__(self) -> None:
        self._gateway: Any = None
        self._classes: dict[str, JavaClass] = {}
        self._as_list: Any = None
        self._lock = threading.Lock()
        self._handed = threading.local()

    def attach(self, gateway: Any) -> None:
        """Build values through ``gateway`` (a py4j ``ClientServer``) from now on."""
        with self._lock:
            self._gateway = gateway
            self._classes.clear()
            self._as_list = None

    def _class(self, name: str) -> JavaClass:
        with self._lock:
            if self._gateway is None:
                raise BridgeError("the bridge's Java side is not attached to a py4j ClientServer yet")
            java_class = self._classes.get(name)
            if java_class is None:
                java_class = self._classes[name] = JavaClass(name, self._gateway._gateway_client)
            return java_class

    def _release(self, obj: Any) -> None:
        """Tell the JVM to drop ``obj``, over the calling thread's connection (one round trip)."""
        self._gateway._gateway_client.garbage_collect_object(obj._get_object_id(), enqueue=False)

    def _hand_over(self, obj: Any) -> Any:
        previous = getattr(self._handed, "value", None)
        self._handed.value = obj
        if previous is not None:
            self._release(previous)
        return obj

    def _job(self, r: JobRecord) -> Any:
        return self._class(f"{JAVA_PACKAGE}.Job")(
            r.job_id,
            r.min_workers,
            r.max_workers,
            r.workers,
            r.target,
            r.elastic,
            r.state,
            _millis(r.submitted_at),
            r.source,
        )

    def job(self, record: JobRecord) -> Any:
        return self._hand_over(self._job(record))

    def job_list(self, records: list[JobRecord]) -> Any:
        # new ArrayList<>(Arrays.asList(jobs)): N + 3 round trips. An Object[]: py4j's reflection does
        # not pass a Job[] as asList's T... argument.
        array = self._gateway.new_array(self._class("java.lang.Object"), len(records))
        for i, record in enumerate(records):
            job = self._job(record)
            array[i] = job
            self._release(job)
        if self._as_list is None:
            self._as_list = self._class("java.util.Arrays").asList
        fixed = self._as_list(array)
        java_list = self._class("java.util.ArrayList")(fixed)
        self._release(fixed)
        self._release(array)
        return self._hand_over(java_list)

    def decision(self, record: DecisionRecord) -> Any:
        return self._hand_over(
            self._class(f"{JAVA_PACKAGE}.Decision")(
                record.job_id,
                _millis(record.time),
                record.from_workers,
                record.to_workers,
                record.reason,
                record.applied,
                record.error,
            )
        )

    def error(self, kind: str, message: str) -> BaseException:
        return JavaExceptionRaised(message, self._hand_over(self._class(f"{JAVA_PACKAGE}.{kind}")(message)))


def _millis(seconds: float) -> int:
    return int(round(seconds * 1000))
