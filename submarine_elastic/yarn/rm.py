"""A client of one ResourceManager's REST API: the HTTP edge (one session with urllib3's retries, simple auth or
SPNEGO, a per-thread deadline), the cluster API's reads (``/ws/v1/cluster``: applications, nodes, queues,
resource totals; the RM's ``/conf``), and polling on an injected clock. The YARN Services API is built on it
(:class:`~submarine_elastic.yarn.client.YarnServiceClient`).
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar, cast
from urllib.parse import urlsplit

import requests

from .. import env
from .api import (
    AppSummary,
    ComponentTarget,
    NodeReport,
    QueueReport,
    RMUnreachableError,
    ServiceNotFoundError,
    ServiceStatus,
    YarnAuthError,
    YarnError,
    YarnRequestError,
    YarnTimeoutError,
    leaf_queues,
    resource_values,
)
from .session import (
    DEFAULT_HTTP_TIMEOUT,
    IDEMPOTENT_METHODS,
    RETRY_STATUSES,
    build_session,
    diagnostics,
    mutual_auth_failed,
    refuse_cookies,
    spnego_auth,
)

__all__ = ["LIVE_APP_STATES", "RmClient"]

logger = logging.getLogger(__name__)

#: YARN application states of a live application (``ServiceClient.liveStates``).
LIVE_APP_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")

_APPS = "/ws/v1/cluster/apps"
_NODES = "/ws/v1/cluster/nodes"
_METRICS = "/ws/v1/cluster/metrics"
_SCHEDULER = "/ws/v1/cluster/scheduler"
_CONF = "/conf"
#: the least time one request under a deadline (reconcile's) is given to connect and to answer, however little is
#: left.
_MIN_REQUEST_S = 1.0

_T = TypeVar("_T")
_R = TypeVar("_R")


class RmClient:
    """Client of one ResourceManager's REST API; :class:`~submarine_elastic.yarn.client.YarnServiceClient` adds
    the Services API to it.

    Every method blocks for one HTTP request (plus urllib3's retries, each bounded by ``timeout``)
    unless it says it waits; every wait has a timeout and raises :class:`YarnTimeoutError` naming
    what it waited for and the last state seen. Waits poll every ``poll_interval`` seconds with ``tenacity``,
    using the injected ``clock`` and ``sleep``. HTTP goes through one shared ``requests.Session``, so give each
    thread that polls at a high rate its own client.

    Args:
        rm_url: ResourceManager web address, e.g. ``http://localhost:8088``.
        user: user for simple auth, sent as ``user.name`` on every request; default
            :func:`submarine_elastic.env.yarn_user`. Ignored with kerberos.
        auth: ``"simple"`` or ``"kerberos"`` (SPNEGO via requests-gssapi, mutual authentication required:
            :func:`~submarine_elastic.yarn.session.spnego_auth`); default :func:`submarine_elastic.env.yarn_auth`.
        keytab, principal: with kerberos, log in from this keytab as this principal (default
            :func:`submarine_elastic.env.yarn_keytab` and :func:`~submarine_elastic.env.yarn_principal`);
            no keytab: the user's credentials cache (``kinit``).
        session: the HTTP edge. When None, :func:`~submarine_elastic.yarn.session.build_session` makes one with
            ``retries`` and ``backoff``; an injected session is used as given (its own retry policy, if any;
            with kerberos, its cookies refused: :func:`~submarine_elastic.yarn.session.refuse_cookies`).
        timeout: seconds for one HTTP request, or (connect, read).
        retries: retries of an idempotent request on connection errors and 502/503/504.
        backoff: urllib3 ``backoff_factor``: sleeps of backoff * 2**(n-1) seconds between retries.
        poll_interval: seconds between reads while waiting.
        clock, sleep: monotonic time source and sleep used by waits (inject fakes in tests).

    Raises:
        ValueError: a bad ``rm_url``, ``auth``, ``retries``, ``backoff``, ``timeout`` or ``poll_interval``.
        KerberosUnavailableError: ``auth="kerberos"`` without requests-gssapi installed.
        YarnAuthError: ``auth="kerberos"`` with a keytab no credentials could be had from.
    """

    def __init__(
        self,
        rm_url: str,
        *,
        user: str | None = None,
        auth: Literal["simple", "kerberos"] | str | None = None,
        keytab: str | os.PathLike[str] | None = None,
        principal: str | None = None,
        session: requests.Session | None = None,
        timeout: float | tuple[float, float] = DEFAULT_HTTP_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.5,
        poll_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        parts = urlsplit(rm_url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"rm_url must be an http(s) URL such as http://localhost:8088, got {rm_url!r}")
        mode = (auth if auth is not None else env.settings().yarn_auth).lower()
        if mode not in ("simple", "kerberos"):
            raise ValueError(f"auth must be 'simple' or 'kerberos', got {auth!r}")
        timeouts = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        if len(timeouts) != 2 or any(t <= 0 for t in timeouts):
            raise ValueError(f"timeout must be > 0 seconds (or a (connect, read) pair), got {timeout!r}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval}")

        self.rm_url = rm_url.rstrip("/")
        self.auth_mode = mode
        self.user: str | None = None
        self._auth: requests.auth.AuthBase | None = None
        if mode == "kerberos":
            self._auth = spnego_auth(
                keytab=keytab if keytab is not None else env.settings().yarn_keytab,
                principal=principal if principal is not None else env.settings().yarn_principal,
            )
        else:
            self.user = user if user is not None else env.settings().user()
        self._owns_session = session is None
        self._session = session if session is not None else build_session(retries=retries, backoff=backoff)
        # What reconcile sends: not sent again after a read timeout (its own next poll reads again), each
        # request bounded by what is left of its timeout (see _send); an injected session is used as given.
        self._bounded_session = (
            build_session(retries=retries, backoff=backoff, read_retries=0) if session is None else session
        )
        if self._auth is not None:
            refuse_cookies(self._session)
            refuse_cookies(self._bounded_session)
        #: the clock time the calling thread's requests must be answered by (``at``; None: no bound)
        self._deadline = threading.local()
        self._timeout = (float(timeouts[0]), float(timeouts[1]))
        self._retries = retries
        self._poll_interval = float(poll_interval)
        self._clock = clock
        self._sleep = sleep
        # The Services API's declarative targets (YarnServiceClient.set_target), read and written under _lock.
        self._targets: dict[tuple[str, str], ComponentTarget] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, default_url: str | None = None, **kwargs: Any) -> Self:
        """A client for ``SUBMARINE_RM_URL`` (else ``default_url``); other settings as in the constructor.

        Raises:
            ValueError: neither ``SUBMARINE_RM_URL`` nor ``default_url`` is set, or a bad argument.
            KerberosUnavailableError: as the constructor.
        """
        url = env.settings().rm_url or default_url
        if url is None:
            raise ValueError("no ResourceManager address: set SUBMARINE_RM_URL or pass default_url")
        return cls(url, **kwargs)

    def close(self) -> None:
        """Close the HTTP sessions if this client created them."""
        if self._owns_session:
            self._session.close()
            self._bounded_session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ HTTP edge

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> requests.Response:
        """Send one request (with the session's retries) and return whatever the RM answered.

        Under the calling thread's deadline (``_deadline.at``, which ``YarnServiceClient.reconcile`` sets) the
        request waits at most what is left of it (at least ``_MIN_REQUEST_S``) and is not sent again after a
        read timeout.

        Raises:
            RMUnreachableError: no connection or a timeout, after the retries.
            YarnRequestError: any other transport failure.
        """
        url = self.rm_url + path
        query = dict(params or {})
        if self.user is not None:
            query["user.name"] = self.user
        # Never the body: a service spec's environment may carry tokens.
        logger.debug("%s %s params=%s", method, url, query)
        session, timeout = self._session, self._timeout
        deadline: float | None = getattr(self._deadline, "at", None)
        if deadline is not None:
            left = max(deadline - self._clock(), _MIN_REQUEST_S)
            session, timeout = self._bounded_session, (min(timeout[0], left), min(timeout[1], left))
        try:
            return session.request(
                method,
                url,
                params=query,
                json=body,
                timeout=timeout,
                auth=self._auth,
                headers={"Accept": "application/json"},
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            maybe = ""
            if method not in IDEMPOTENT_METHODS:
                maybe = " (the RM may have applied it: read the state back)"
            raise RMUnreachableError(
                f"{method} {path}: ResourceManager at {self.rm_url} unreachable: {exc}{maybe}"
            ) from exc
        except requests.RequestException as exc:
            if self._auth is not None and mutual_auth_failed(exc):
                raise YarnAuthError(
                    f"{method} {path}: refused the answer of {self.rm_url}: the server did not prove it holds "
                    f"the ResourceManager's Kerberos key (SPNEGO mutual authentication is required)"
                ) from exc
            raise YarnRequestError(f"{method} {path}: request failed: {exc}") from exc

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        ok: Iterable[int] = (200,),
    ) -> requests.Response:
        """Send one request; return the response if its status is in ``ok``, else raise.

        Raises:
            RMUnreachableError: no connection, a timeout, or 502/503/504 after the retries.
            YarnAuthError: 401 or 403.
            ServiceNotFoundError: 404 with the API's JSON body.
            YarnRequestError: any other status not in ``ok``; callers refine it.
        """
        resp = self._send(method, path, params=params, body=body)
        if resp.status_code in set(ok):
            return resp
        raise self._error(method, path, resp)

    def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """The JSON answer of ``GET path`` (one request).

        Raises:
            YarnRequestError: the answer is not JSON; else as :meth:`_request`.
        """
        resp = self._request("GET", path, params=params)
        try:
            return resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {path}: answer is not JSON: {resp.text[:200]!r}") from exc

    def _error(self, method: str, path: str, resp: requests.Response) -> YarnError:
        status = resp.status_code
        diag, is_json = diagnostics(resp)
        where = f"{method} {path} -> HTTP {status}"
        text = f": {diag}" if diag else ""
        if status in (401, 403):
            hint = ""
            if status == 401 and self.auth_mode == "kerberos":
                hint = " (no Kerberos credentials the RM accepts: kinit, or set SUBMARINE_YARN_KEYTAB)"
            return YarnAuthError(f"{where}, access denied{text}{hint}", status_code=status, diagnostics=diag)
        if status in RETRY_STATUSES:
            retried = f" after {self._retries} retries" if method in IDEMPOTENT_METHODS else ""
            return RMUnreachableError(
                f"{where}{retried}: ResourceManager unavailable{text}", status_code=status, diagnostics=diag
            )
        if status == 404:
            if is_json:
                return ServiceNotFoundError(f"{where}{text}", status_code=status, diagnostics=diag)
            return YarnRequestError(
                f"{where} without the services API's JSON answer; is yarn.webapp.api-service.enable=true "
                f"on the RM?{text}",
                status_code=status,
                diagnostics=diag,
            )
        return YarnRequestError(f"{where}{text}", status_code=status, diagnostics=diag)

    def list(
        self, states: Sequence[str] | None = LIVE_APP_STATES, *, user: str | None = None
    ) -> builtins.list[AppSummary]:
        """yarn-service applications known to the RM (``/ws/v1/cluster/apps?applicationTypes=yarn-service``).

        The services API has no list call; the RM's application list is the source. Blocks for one request.

        Args:
            states: YARN application states to include (default: the live ones); None for all.
            user: only applications of this user.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        params = {"applicationTypes": "yarn-service"}
        if states:
            params["states"] = ",".join(s.upper() for s in states)
        if user:
            params["user"] = user
        summaries = [AppSummary.from_json(a) for a in _listed(self._get_json(_APPS, params), "apps", "app")]
        return sorted(summaries, key=lambda a: (a.name, a.id))

    def app_state(self, app_id: str) -> str | None:
        """The YARN application state of ``app_id`` (NEW ... RUNNING, FINISHED, FAILED, KILLED), None when the
        RM does not know it (``/ws/v1/cluster/apps/{id}`` answers 404). Blocks for one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        try:
            app = self._get_json(f"{_APPS}/{app_id}").get("app") or {}
        except YarnError as exc:
            if exc.status_code == 404:  # the RM's 404 for an application it does not know
                return None
            raise
        state = app.get("state")
        return str(state) if state else None

    def nodes(self, states: Sequence[str] = ("RUNNING",)) -> builtins.list[NodeReport]:
        """NodeManagers known to the RM in ``states`` (``/ws/v1/cluster/nodes``), sorted by id. Blocks for
        one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        params = {"states": ",".join(s.upper() for s in states)} if states else None
        reports = [NodeReport.from_json(n) for n in _listed(self._get_json(_NODES, params), "nodes", "node")]
        return sorted(reports, key=lambda n: n.node_id)

    def queues(self) -> builtins.list[QueueReport]:
        """The scheduler's leaf queues (``/ws/v1/cluster/scheduler``), with their capacities, use and pending
        requests; [] where the scheduler has no queues. Blocks for one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        return leaf_queues(self._get_json(_SCHEDULER))

    def resource_totals(self) -> dict[str, int]:
        """Every resource type the RM knows, with the cluster's total of it (its metrics'
        ``totalClusterResourcesAcrossPartition``): ``memory-mb`` and ``vcores``, and ``yarn.io/gpu`` only where
        the RM declares it (``resource-types.xml``). Blocks for one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request; an answer without the
                resource totals (a ResourceManager older than Hadoop 3.3) is a YarnRequestError.
        """
        resp = self._request("GET", _METRICS)
        try:
            metrics = resp.json().get("clusterMetrics") or {}
        except (ValueError, AttributeError) as exc:
            raise YarnRequestError(f"GET {_METRICS}: answer is not JSON: {resp.text[:200]!r}") from exc
        totals = resource_values(
            metrics.get("totalClusterResourcesAcrossPartition") if isinstance(metrics, dict) else None
        )
        if not totals:
            raise YarnRequestError(f"GET {_METRICS}: no totalClusterResourcesAcrossPartition in {resp.text[:200]!r}")
        return totals

    def config_value(self, name: str) -> str | None:
        """The value of one property of the RM's configuration (its ``/conf`` page), or None when it is
        not set there. Blocks for one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        resp = self._send("GET", _CONF, params={"name": name})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._error("GET", _CONF, resp)
        try:
            prop = resp.json().get("property") or {}
        except (ValueError, AttributeError) as exc:
            raise YarnRequestError(f"GET {_CONF}: unexpected answer {resp.text[:200]!r}") from exc
        value = prop.get("value") if isinstance(prop, dict) and prop.get("key") == name else None
        return None if value is None else str(value)

    def _wait(self, what: str, probe: Callable[[], tuple[bool, _T]], timeout: float) -> _T:
        """Call ``probe`` every poll interval until it says done; an unreachable RM counts as not done.

        Raises:
            YarnTimeoutError: not done within ``timeout`` (naming ``what``, the last state and error).
            What ``probe`` raises, but RMUnreachableError.
        """
        last: list[object] = [None]
        last_error: list[YarnError | None] = [None]

        def attempt() -> tuple[_T] | None:
            try:
                done, value = probe()
            except RMUnreachableError as exc:
                last_error[0] = exc
                return None
            last[0], last_error[0] = value, None
            return (value,) if done else None

        def give_up() -> tuple[_T]:
            seen = last[0].describe() if isinstance(last[0], ServiceStatus) else repr(last[0])
            why = f"; last error: {last_error[0]}" if last_error[0] is not None else ""
            message = f"timed out after {timeout:g}s waiting for {what}; last state: {seen}{why}"
            raise YarnTimeoutError(message, last_state=last[0])

        return self._poll(attempt, timeout, give_up)[0]

    def _poll(self, attempt: Callable[[], _R | None], timeout: float, give_up: Callable[[], _R]) -> _R:
        """The first answer of ``attempt`` that is not None (not done yet), one attempt every poll
        interval; after ``timeout`` seconds of the injected clock, what ``give_up`` returns (or raises).
        An exception of ``attempt`` ends the polling and propagates."""
        from tenacity import Retrying, retry_if_result  # only a call that waits pays for its import

        deadline = self._clock() + timeout
        retrying = Retrying(
            stop=lambda _state: self._clock() >= deadline,
            wait=lambda _state: min(self._poll_interval, max(0.0, deadline - self._clock())),
            retry=retry_if_result(lambda answer: answer is None),
            retry_error_callback=lambda _state: give_up(),
            sleep=self._sleep,
        )
        # Not None: tenacity returns the first answer that is not None, or else what give_up returns.
        return cast(_R, retrying(attempt))


def _listed(data: Any, outer: str, inner: str) -> builtins.list[Mapping[str, Any]]:
    """The objects of a cluster API list (``{"apps": {"app": [...]}}``); [] for an empty one (the RM answers
    ``{"apps": null}``)."""
    box = (data.get(outer) or {}) if isinstance(data, dict) else {}
    items = box.get(inner) or [] if isinstance(box, dict) else []
    return [item for item in items if isinstance(item, Mapping)]
