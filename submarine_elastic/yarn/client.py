"""HTTP client of the YARN Services REST API (``/app/v1/services``) and the RM's application list.

What the ResourceManager answers (read from ``ApiServer`` and ``ServiceClient`` of Hadoop 3.x):

============================================  =====================================================
request                                       answer
============================================  =====================================================
``POST /app/v1/services``                     202 ``{"diagnostics": "Application ID: ...", "state":
                                              "ACCEPTED", "uri": ...}``; 400 when the spec fails
                                              ``ServiceApiUtil`` validation; 500 ``"Service name X is
                                              already taken."`` for an existing name; 500 for other
                                              failures (HDFS, submission, resource above the maximum)
``GET /app/v1/services/{name}``               200 the service; 404 ``"Service X not found"``
``PUT .../{name}/components/{comp}``          200 ``"Updating component (c) size from a to b"``; 400
                                              for a missing/negative count; 500 for anything the
                                              RM's service client throws (unknown service or
                                              component, service not RUNNING)
``PUT /app/v1/services/{name}``               STOPPED: 200, 400 ``"... is already stopped"``;
                                              STARTED: 200, 400 when already running; decommission:
                                              202; 404 unknown service; 204 when nothing to do
``DELETE /app/v1/services/{name}``            200 ``"Successfully destroyed service X"`` (stops it
                                              first, synchronously); 400 ``"Service X doesn't
                                              exist"``
============================================  =====================================================

Errors are JSON ``{"diagnostics": "..."}``; the text goes into every :class:`YarnError` raised here.
Where the status code alone is ambiguous (the RM uses 500 for permanent failures too), the client
reads the service's state back to pick the narrow error.

Retries of a request are urllib3's, on the session (:mod:`~submarine_elastic.yarn.session`: connection errors
and 502/503/504, idempotent methods only; never 500). The parts: the HTTP edge and the cluster API's reads in
:mod:`~submarine_elastic.yarn.rm` (:class:`RmClient`, which this client extends), the reconciliation of a
component with its target in :mod:`~submarine_elastic.yarn.reconcile`.
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from submarine_elastic.limits import YARN_NAME_CHARS

from .api import (
    ComponentNotFoundError,
    ComponentTarget,
    ContainerStatus,
    InvalidSpecError,
    ReconcileResult,
    ServiceAlreadyExistsError,
    ServiceBackend,
    ServiceFailedError,
    ServiceNotFoundError,
    ServiceState,
    ServiceStateError,
    ServiceStatus,
    YarnError,
    YarnRequestError,
    instance_number,
)
from .reconcile import RUNNING_STATES, Reconciliation
from .rm import RmClient
from .session import diagnostics, was_retried

if TYPE_CHECKING:
    from .spec import Service

__all__ = ["SPEC_REWRITE_RETRIES", "SPEC_REWRITE_RETRY_S", "YarnServiceClient"]

logger = logging.getLogger(__name__)

#: A service's spec read while its ApplicationMaster rewrites it: on HDFS the file is empty until its writer
#: closes it, and the RM answers 500 with Jackson's words for an empty input. ``status`` reads it again, at
#: most this many times, :data:`SPEC_REWRITE_RETRY_S` apart.
SPEC_REWRITE_RETRIES = 10
SPEC_REWRITE_RETRY_S = 0.2
_SPEC_BEING_WRITTEN = "No content to map due to end-of-input"
_SERVICES = "/app/v1/services"
_APP_ID = re.compile(r"application_\d+_\d+")
_YE = TypeVar("_YE", bound=YarnError)


def _narrow(cls: type[_YE], message: str, cause: YarnError) -> _YE:
    """A narrower error that keeps the RM's status code and diagnostics of ``cause``."""
    return cls(message, status_code=cause.status_code, diagnostics=cause.diagnostics)


def _spec_being_written(exc: BaseException) -> bool:
    """Whether the RM failed to read a service's spec because its ApplicationMaster is rewriting it."""
    if not isinstance(exc, YarnRequestError):
        return False
    return exc.status_code == 500 and _SPEC_BEING_WRITTEN in (exc.diagnostics or "")


def _check_name(value: str, kind: str) -> str:
    if not isinstance(value, str) or YARN_NAME_CHARS.fullmatch(value) is None:
        raise ValueError(f"{kind} name {value!r} must match [a-z][a-z0-9-]*")
    return value


def _check_count(n: int, what: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{what} must be an int >= 0, got {n!r}")
    return n


def _check_timeout(timeout: float) -> float:
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
    return float(timeout)


class YarnServiceClient(RmClient, ServiceBackend):
    """Client of one ResourceManager's YARN Services API; constructed as :class:`RmClient` (the arguments, what
    blocks, how waits poll).

    Targets recorded by :meth:`set_target` are guarded by a lock; :meth:`reconcile` polls with ``tenacity``,
    stopping on the injected ``clock``, each of its requests bounded by what is left of its timeout.
    """

    @staticmethod
    def _service_path(name: str) -> str:
        return f"{_SERVICES}/{quote(_check_name(name, 'service'), safe='')}"

    # -------------------------------------------------------------------------------------- reading

    def hadoop_version(self) -> str:
        """The RM's Hadoop build version (``GET /app/v1/services/version``); a cheap liveness probe.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        resp = self._request("GET", f"{_SERVICES}/version")
        try:
            return str(resp.json().get("hadoop_version", "")).strip()
        except (ValueError, AttributeError) as exc:
            raise YarnRequestError(f"GET {_SERVICES}/version: unexpected answer {resp.text[:200]!r}") from exc

    def status(self, name: str) -> ServiceStatus:
        """The service as the RM reports it (``GET /app/v1/services/{name}``). Blocks for one request.

        Raises:
            ValueError: ``name`` is not a valid service name.
            ServiceNotFoundError: the RM does not know the service.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed  # see RmClient._poll

        path = self._service_path(name)
        resp = Retrying(
            stop=stop_after_attempt(SPEC_REWRITE_RETRIES + 1),
            wait=wait_fixed(SPEC_REWRITE_RETRY_S),
            retry=retry_if_exception(_spec_being_written),
            sleep=self._sleep,
            reraise=True,
        )(self._request, "GET", path)
        try:
            data = resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {path}: answer is not JSON: {resp.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise YarnRequestError(f"GET {path}: expected a JSON object, got {type(data).__name__}")
        return ServiceStatus.from_json(data)

    def ready_instances(self, name: str, component: str) -> builtins.list[ContainerStatus]:
        """READY containers of ``component``, sorted by instance number (worker-0, worker-1, ...).

        Empty while the service's AM is not running yet. Blocks for one request.

        Raises:
            ValueError: an invalid service or component name.
            ServiceNotFoundError: no such service.
            ComponentNotFoundError: the running service has no such component.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_name(component, "component")
        status = self.status(name)
        comp = status.component(component)
        if comp is None:
            if status.components:
                raise ComponentNotFoundError(
                    f"service {name!r} has no component {component!r} "
                    f"(has {', '.join(c.name for c in status.components)})"
                )
            return []
        return list(comp.ready_containers)

    # ------------------------------------------------------------------------------------- lifecycle

    def create(self, spec: Service | Mapping[str, Any], *, wait: bool = True, timeout: float = 600.0) -> ServiceStatus:
        """Create (submit) a service; with ``wait``, block until it is ready or ``timeout`` seconds pass.

        Ready means STABLE, or running with every component's desired containers READY. The POST is
        sent once and never retried after it may have reached the RM.

        Returns:
            The status once ready; without ``wait``, the RM's acceptance (state ACCEPTED, ``id`` the
            application id).

        Raises:
            InvalidSpecError: the spec is invalid (checked locally first; else the RM's diagnostics).
            ServiceAlreadyExistsError: a service of that name exists.
            ServiceFailedError: while waiting, the service stopped or failed.
            YarnTimeoutError: not ready within ``timeout``.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_timeout(timeout)
        from .spec import Service  # pydantic: loaded by the calls that need it

        service = spec if isinstance(spec, Service) else Service.from_dict(spec)
        try:
            resp = self._request("POST", _SERVICES, body=service.to_dict(), ok=range(200, 300))
        except YarnRequestError as exc:
            raise self._create_error(service.name, exc) from exc
        diag, _ = diagnostics(resp)
        match = _APP_ID.search(diag or "")
        logger.info("created service %s (%s)", service.name, diag)
        if wait:
            return self.wait_until_ready(service.name, timeout=timeout)
        return ServiceStatus(
            name=service.name,
            state=ServiceState.ACCEPTED,
            id=match.group(0) if match else None,
            version=service.version,
            diagnostics=diag,
        )

    @staticmethod
    def _create_error(name: str, exc: YarnRequestError) -> YarnError:
        diag = exc.diagnostics or ""
        lowered = diag.lower()
        if exc.status_code == 400 or "larger than configured max" in lowered:
            return _narrow(InvalidSpecError, f"the RM rejected the spec of service {name!r}: {diag}", exc)
        if "already taken" in lowered or "already exists" in lowered:
            return _narrow(ServiceAlreadyExistsError, f"service {name!r} already exists: {diag}", exc)
        return exc

    def flex(self, name: str, component: str, n: int) -> None:
        """Ask for ``n`` containers of ``component`` (``PUT .../components/{component}``); does not wait.

        On scale-in YARN removes the highest-numbered instances. Blocks for one request (retried:
        setting a count is idempotent).

        Raises:
            ValueError: a negative ``n`` or an invalid name.
            ServiceNotFoundError, ComponentNotFoundError: no such service or component.
            ServiceStateError: the service is not running (e.g. still ACCEPTED, or stopped).
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_count(n)
        path = f"{self._service_path(name)}/components/{quote(_check_name(component, 'component'), safe='')}"
        try:
            self._request("PUT", path, body={"number_of_containers": n}, ok=(200, 202, 204))
        except YarnRequestError as exc:
            raise self._classify(name, component, exc, action="flex") from exc
        logger.info("flexed %s/%s to %d", name, component, n)

    def decommission(
        self,
        name: str,
        component: str,
        instances: Sequence[str],
        *,
        wait: bool = False,
        timeout: float = 300.0,
    ) -> None:
        """Remove the named instances (``worker-1``) of ``component``; YARN lowers its count by as many.

        ``PUT /app/v1/services/{name}`` with ``decommissioned_instances``. With ``wait``, blocks until
        none of the instances is listed any more, at most ``timeout`` seconds.

        Raises:
            ValueError: no instances, or one that is not ``<component>-<number>``.
            ServiceNotFoundError, ComponentNotFoundError: no such service or component.
            ServiceStateError: the service is not running.
            YarnTimeoutError: with ``wait``, an instance is still listed after ``timeout``.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_name(component, "component")
        _check_timeout(timeout)
        names = list(dict.fromkeys(instances))
        if not names:
            raise ValueError("instances must name at least one component instance")
        for inst in names:
            if not isinstance(inst, str) or not inst.startswith(f"{component}-"):
                raise ValueError(f"instance {inst!r} is not an instance of component {component!r}")
            instance_number(inst)
        body = {"components": [{"name": component, "decommissioned_instances": names}]}
        try:
            self._request("PUT", self._service_path(name), body=body, ok=(200, 202, 204))
        except YarnRequestError as exc:
            raise self._classify(name, component, exc, action="decommission") from exc
        logger.info("decommissioned %s from %s/%s", names, name, component)
        if wait:

            def gone() -> tuple[bool, ServiceStatus]:
                status = self.status(name)
                comp = status.component(component)
                listed = {c.component_instance_name for c in comp.containers} if comp else set()
                return not listed.intersection(names), status

            self._wait(f"instances {names} of service {name!r} to be removed", gone, timeout)

    def stop(self, name: str, *, wait: bool = True, timeout: float = 120.0) -> None:
        """Stop the service, keeping its definition (``PUT {"state": "STOPPED"}``).

        Stopping a stopped service is not an error. With ``wait``, blocks until the RM reports it
        STOPPED (or FAILED/SUCCEEDED), at most ``timeout`` seconds.

        Raises:
            ServiceNotFoundError: no such service.
            ServiceStateError: the RM refused and the service is not stopped.
            YarnTimeoutError: with ``wait``, still not stopped after ``timeout``.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_timeout(timeout)
        path = self._service_path(name)
        try:
            self._request("PUT", path, body={"state": "STOPPED"}, ok=(200, 202, 204))
        except YarnRequestError as exc:
            current = self._status_or_none(name)
            if current is None:
                raise _narrow(ServiceNotFoundError, f"cannot stop service {name!r}: not found", exc) from exc
            if not current.is_terminal:
                message = f"cannot stop {current.describe()}: {exc.diagnostics or exc}"
                raise _narrow(ServiceStateError, message, exc) from exc
        if wait:

            def stopped() -> tuple[bool, ServiceStatus]:
                status = self.status(name)
                return status.is_terminal, status

            self._wait(f"service {name!r} to stop", stopped, timeout)

    def start(self, name: str, *, wait: bool = True, timeout: float = 600.0) -> ServiceStatus:
        """Start a stopped service again (``PUT {"state": "STARTED"}``).

        Starting a running service is not an error. With ``wait``, blocks until it is ready (as
        :meth:`create`), at most ``timeout`` seconds.

        Returns:
            The status once ready, or the status read right after the request without ``wait``.

        Raises:
            ServiceNotFoundError: no such service.
            ServiceStateError: the RM refused to start it and it is not running.
            ServiceFailedError: while waiting, the service stopped or failed.
            YarnTimeoutError: with ``wait``, not ready within ``timeout``.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_timeout(timeout)
        path = self._service_path(name)
        try:
            self._request("PUT", path, body={"state": "STARTED"}, ok=(200, 202, 204))
        except YarnRequestError as exc:
            current = self._status_or_none(name)
            if current is None:
                raise _narrow(ServiceNotFoundError, f"cannot start service {name!r}: not found", exc) from exc
            if current.is_terminal or current.state is None:
                message = f"cannot start {current.describe()}: {exc.diagnostics or exc}"
                raise _narrow(ServiceStateError, message, exc) from exc
        if wait:
            return self.wait_until_ready(name, timeout=timeout)
        return self.status(name)

    def destroy(self, name: str, *, wait: bool = True, timeout: float = 120.0, missing_ok: bool = False) -> None:
        """Stop the service if needed and delete it and its definition (``DELETE``).

        With ``wait``, blocks until ``GET`` answers 404 and the RM lists no live application of that
        name, at most ``timeout`` seconds.

        A DELETE that urllib3 had to resend may find its own earlier attempt already done; that
        "doesn't exist" answer counts as success.

        Raises:
            ServiceNotFoundError: no such service, unless ``missing_ok``.
            ServiceStateError: the RM could not stop it ("still running").
            YarnTimeoutError: with ``wait``, still present after ``timeout``.
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        _check_timeout(timeout)
        path = self._service_path(name)
        resp = self._send("DELETE", path)
        if resp.status_code not in (200, 202, 204):
            error = self._error("DELETE", path, resp)
            diag = (error.diagnostics or "").lower()
            missing = ("doesn't exist", "does not exist", "not found")
            not_found = isinstance(error, ServiceNotFoundError) or (
                resp.status_code == 400 and any(m in diag for m in missing)
            )
            if not not_found:
                if resp.status_code == 400:
                    message = f"cannot destroy service {name!r}: {error.diagnostics or error}"
                    raise _narrow(ServiceStateError, message, error)
                raise error
            if not (missing_ok or was_retried(resp)):
                message = f"cannot destroy service {name!r}: not found ({error.diagnostics or error})"
                raise _narrow(ServiceNotFoundError, message, error)
        logger.info("destroyed service %s", name)
        if wait:

            def gone() -> tuple[bool, object]:
                try:
                    status = self.status(name)
                except ServiceNotFoundError:
                    live = [a for a in self.list() if a.name == name]
                    return not live, live or "GET answers 404"
                return False, status

            self._wait(f"service {name!r} to be gone", gone, timeout)

    # ------------------------------------------------------------------------------------ declarative

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        """Record that ``component`` should have ``n`` containers and none of the ``remove`` instances;
        :meth:`reconcile` gets it there and keeps it there.

        Sends nothing; blocks for nothing.

        Raises:
            ValueError: a negative ``n``, an invalid name, or a ``remove`` entry that is not
                ``<component>-<number>``.
        """
        _check_name(name, "service")
        _check_name(component, "component")
        for inst in remove:
            if not isinstance(inst, str) or not inst.startswith(f"{component}-"):
                raise ValueError(f"instance {inst!r} is not an instance of component {component!r}")
        target = ComponentTarget(_check_count(n), tuple(dict.fromkeys(remove)))
        with self._lock:
            self._targets[(name, component)] = target
        return target

    def target(self, name: str, component: str) -> ComponentTarget | None:
        """The target last given to :meth:`set_target` or :meth:`reconcile`, or None."""
        with self._lock:
            return self._targets.get((name, component))

    def reconcile(
        self,
        name: str,
        component: str,
        n: int | None = None,
        *,
        timeout: float = 300.0,
        give_way: Callable[[], bool] | None = None,
    ) -> ReconcileResult:
        """Read the state back until ``component`` matches its target, for at most ``timeout`` s (or until
        ``give_way()``, asked after each read that did not end it, is true: the result is then that of a
        reconciliation out of time), acting when the RM's state differs from it.

        ``n`` defaults to the recorded target (and, when given, becomes it, removing nothing by name).
        While the service runs: a ``remove`` instance that is still listed and not yet decommissioned
        is decommissioned (the RM skips one it already has, so repeating is safe); otherwise, if the
        RM's desired count differs from the target, the flex is sent. Either is sent at the first read
        and again after ``_REFLEX_AFTER_POLLS`` reads without effect (a lost PUT, an AM restart); one
        that failed is sent again at the next read. Converged means desired == READY == listed
        containers == target, with no ``remove`` instance listed.

        Blocks for about ``timeout`` s at most: each request waits only what is left of it (at least
        ``_MIN_REQUEST_S``) and is not sent again after a read timeout, so a ResourceManager that takes
        connections but does not answer (stopped, overloaded) holds it that long, not the client's read
        timeout times its retries.

        Never raises :class:`YarnError`: a timeout, a missing service or component, or a stopped service
        comes back in :attr:`ReconcileResult.error`; an unreachable RM, or one refusing because the
        service is not running yet, is retried until the timeout (whose message names the last such
        failure), so a controller loop can poll it from any thread.

        Raises:
            ValueError: no target given nor recorded; a negative target or timeout; an invalid name.
        """
        _check_name(name, "service")
        _check_name(component, "component")
        _check_timeout(timeout)
        with self._lock:
            if n is not None:
                self._targets[(name, component)] = ComponentTarget(_check_count(n))
            target = self._targets.get((name, component))
        if target is None:
            raise ValueError(f"no target for {name}/{component}: pass n or call set_target first")
        run = Reconciliation(self, name, component, target, self._clock)
        self._deadline.at = self._clock() + timeout

        def step() -> ReconcileResult | None:
            done = run.step()
            if done is None and give_way is not None and give_way():
                return run.timed_out()
            return done

        try:
            return self._poll(step, timeout, run.timed_out)
        finally:
            self._deadline.at = None

    # ------------------------------------------------------------------------------------------ waits

    def wait_until_ready(self, name: str, *, timeout: float = 600.0) -> ServiceStatus:
        """Block until the service is STABLE or all desired containers are READY, at most ``timeout`` s.

        Raises:
            ServiceFailedError: the service reached STOPPED, FAILED or SUCCEEDED.
            YarnTimeoutError: not ready in time (the message has the last state seen).
            ServiceNotFoundError, YarnAuthError, YarnRequestError: as :meth:`status`; an unreachable
                RM is retried until the timeout.
        """
        _check_timeout(timeout)

        def ready() -> tuple[bool, ServiceStatus]:
            status = self.status(name)
            if status.is_terminal:
                raise ServiceFailedError(f"{status.describe()} while waiting for it to become ready", last_state=status)
            return status.is_ready, status

        return self._wait(f"service {name!r} to become ready (STABLE)", ready, timeout)

    def wait_for_ready(
        self, name: str, component: str, n: int, *, timeout: float = 300.0
    ) -> builtins.list[ContainerStatus]:
        """Block until exactly ``n`` containers of ``component`` are READY (and no others listed).

        Returns:
            The READY containers, sorted by instance number.

        Raises:
            ValueError: a negative ``n`` or ``timeout``.
            YarnTimeoutError: not reached within ``timeout``.
            ServiceNotFoundError, ComponentNotFoundError, YarnAuthError, YarnRequestError: as
                :meth:`ready_instances`; an unreachable RM is retried until the timeout.
        """
        _check_count(n)
        _check_timeout(timeout)

        def count() -> tuple[bool, ServiceStatus]:
            status = self.status(name)
            comp = status.component(component)
            if comp is None and status.components:
                raise ComponentNotFoundError(f"service {name!r} has no component {component!r}")
            done = comp is not None and comp.ready_count == n == len(comp.containers)
            return done, status

        status = self._wait(f"{n} READY {component} containers of service {name!r}", count, timeout)
        comp = status.component(component)
        return list(comp.ready_containers) if comp is not None else []

    # --------------------------------------------------------------------------------------- helpers

    def _status_or_none(self, name: str) -> ServiceStatus | None:
        try:
            return self.status(name)
        except ServiceNotFoundError:
            return None

    def _classify(self, name: str, component: str, exc: YarnRequestError, *, action: str) -> YarnError:
        """Pick the narrow error for a failed flex/decommission by reading the service back.

        The RM answers 500 both for an unknown service/component and for a service that is not
        running, so the status code alone cannot tell them apart.
        """
        said = f"; RM said: {exc.diagnostics}" if exc.diagnostics else ""
        try:
            status = self.status(name)
        except ServiceNotFoundError:
            return _narrow(ServiceNotFoundError, f"cannot {action} service {name!r}: not found{said}", exc)
        except YarnError:
            return exc
        if status.components and status.component(component) is None:
            message = f"cannot {action}: service {name!r} has no component {component!r}{said}"
            return _narrow(ComponentNotFoundError, message, exc)
        if status.state not in RUNNING_STATES:
            message = f"cannot {action} {status.describe()}: it is not running{said}"
            return _narrow(ServiceStateError, message, exc)
        return exc
