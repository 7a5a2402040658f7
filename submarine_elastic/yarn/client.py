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

Retries: urllib3 ``Retry`` on the session, with backoff, for connection errors and 502/503/504, and
only for idempotent methods (GET, PUT, DELETE). 500 is *not* retried: the services API uses it for
permanent failures ("already taken", unknown component, service not running), so a retry would only
delay the error. See :func:`build_session` for why POST is never retried once it may have been sent.
"""

from __future__ import annotations

import builtins
import http.cookiejar
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from submarine_elastic.limits import YARN_NAME_CHARS

from .. import env
from .api import (
    AppSummary,
    ComponentNotFoundError,
    ComponentTarget,
    ContainerStatus,
    InvalidSpecError,
    KerberosUnavailableError,
    NodeReport,
    QueueReport,
    ReconcileResult,
    RMUnreachableError,
    ServiceAlreadyExistsError,
    ServiceBackend,
    ServiceFailedError,
    ServiceNotFoundError,
    ServiceState,
    ServiceStateError,
    ServiceStatus,
    YarnAuthError,
    YarnError,
    YarnRequestError,
    YarnTimeoutError,
    instance_number,
    leaf_queues,
    resource_values,
)

if TYPE_CHECKING:
    from .spec import Service

__all__ = [
    "DEFAULT_HTTP_TIMEOUT",
    "IDEMPOTENT_METHODS",
    "LIVE_APP_STATES",
    "RETRY_STATUSES",
    "YarnServiceClient",
    "build_session",
    "refuse_cookies",
    "spnego_auth",
]

logger = logging.getLogger(__name__)

#: (connect, read) seconds for one HTTP request. DELETE stops the service synchronously, which the
#: RM bounds at about 10 s before it kills the application, so the read timeout stays well above that.
DEFAULT_HTTP_TIMEOUT: tuple[float, float] = (5.0, 60.0)
#: Methods whose repetition cannot change the outcome; only these are retried after being sent.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Gateway / unavailable answers (a proxy, a restarting or standby RM). Not 500: see the module doc.
RETRY_STATUSES = (502, 503, 504)
#: A service's spec read while its ApplicationMaster rewrites it: on HDFS the file is empty until its writer
#: closes it, and the RM answers 500 with Jackson's words for an empty input. ``status`` reads it again, at
#: most this many times, :data:`SPEC_REWRITE_RETRY_S` apart.
SPEC_REWRITE_RETRIES = 10
SPEC_REWRITE_RETRY_S = 0.2
_SPEC_BEING_WRITTEN = "No content to map due to end-of-input"
#: YARN application states of a live application (``ServiceClient.liveStates``).
LIVE_APP_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")

_SERVICES = "/app/v1/services"
_APPS = "/ws/v1/cluster/apps"
_NODES = "/ws/v1/cluster/nodes"
_METRICS = "/ws/v1/cluster/metrics"
_SCHEDULER = "/ws/v1/cluster/scheduler"
_CONF = "/conf"
_RUNNING_STATES = frozenset({ServiceState.STARTED, ServiceState.STABLE, ServiceState.FLEX})
_APP_ID = re.compile(r"application_\d+_\d+")
#: reconcile re-sends a flex (or decommission) that the RM has not taken up after this many polls.
_REFLEX_AFTER_POLLS = 10
#: errors reconcile keeps trying through: the RM down or restarting, a service not running *yet*.
_TRANSIENT = (RMUnreachableError, ServiceStateError, YarnRequestError)
#: the least time one request of reconcile is given to connect and to answer, however little is left.
_MIN_REQUEST_S = 1.0

_T = TypeVar("_T")
_R = TypeVar("_R")
_YE = TypeVar("_YE", bound=YarnError)


def _narrow(cls: type[_YE], message: str, cause: YarnError) -> _YE:
    """A narrower error that keeps the RM's status code and diagnostics of ``cause``."""
    return cls(message, status_code=cause.status_code, diagnostics=cause.diagnostics)


def build_session(
    *, retries: int = 3, backoff: float = 0.5, backoff_max: float = 10.0, read_retries: int | None = None
) -> requests.Session:
    """A :class:`requests.Session` with the client's retry policy mounted for http and https.

    Why POST is never retried once it may have been sent: ``POST /app/v1/services`` submits a YARN
    application. If the connection drops after the request left, the RM may have created the
    service; a blind retry would then fail with "already taken" (hiding the success) or, after a
    concurrent destroy, create it twice. urllib3 retries a method outside ``allowed_methods`` only
    on *connect* errors (``ConnectTimeoutError``, ``NewConnectionError``), raised before a byte of
    the request is written, which is safe; read errors and retryable statuses are not retried for
    POST. GET, PUT (flex to N, state STOPPED/STARTED, decommission a named instance) and DELETE
    give the same end state when repeated, so they are retried on both. ``read_retries`` (default
    ``retries``) bounds the retries after a request was sent and no answer came in time. Blocks for nothing.

    Raises:
        ValueError: a negative ``retries``, ``read_retries``, ``backoff`` or ``backoff_max``.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if read_retries is not None and read_retries < 0:
        raise ValueError(f"read_retries must be >= 0, got {read_retries}")
    if backoff < 0 or backoff_max < 0:
        raise ValueError(f"backoff and backoff_max must be >= 0, got {backoff} and {backoff_max}")
    retry = Retry(
        total=None,
        connect=retries,
        read=retries if read_retries is None else read_retries,
        status=retries,
        other=0,
        allowed_methods=IDEMPOTENT_METHODS,
        status_forcelist=RETRY_STATUSES,
        backoff_factor=backoff,
        backoff_max=backoff_max,
        raise_on_status=False,
        respect_retry_after_header=True,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def spnego_auth(
    *, keytab: str | os.PathLike[str] | None = None, principal: str | None = None
) -> requests.auth.AuthBase:
    """SPNEGO (``requests-gssapi``) as the ResourceManager's web endpoints take it, with mutual authentication
    REQUIRED: every answer must carry the server's proof that it holds the RM's ``HTTP/<host>`` key, and
    one without it (a server that is not the RM, or one that does not check Kerberos) is refused with
    ``MutualAuthenticationError``, which :class:`YarnServiceClient` raises as :class:`YarnAuthError`. The
    token goes with the first request (no 401 round trip first).

    So that every answer carries that proof, a session using this auth must not send Hadoop's
    ``hadoop.auth`` cookie back (an answer to a cookie carries none): see :func:`refuse_cookies`.

    Args:
        keytab: log in from this keytab (as ``kinit -kt`` does) into a credentials cache private to this
            process (``MEMORY:``), renewed from the keytab when the ticket nears its end; nothing is written
            to disk. None: the user's credentials cache (``kinit``, ``KRB5CCNAME``).
        principal: the keytab's principal to log in as; default its first.

    Raises:
        KerberosUnavailableError: ``requests-gssapi`` is not installed.
        YarnAuthError: no credentials could be had from ``keytab`` (the keytab and the reason named).
    """
    try:
        import gssapi  # type: ignore[import-not-found,unused-ignore]
        import requests_gssapi  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise KerberosUnavailableError(
            "auth='kerberos' needs the requests-gssapi package: pip install 'submarine-elastic[kerberos]'"
        ) from exc
    creds = None
    if keytab is not None:
        path = os.fspath(keytab)
        if not os.path.isfile(path):
            raise YarnAuthError(f"Kerberos keytab {path} is not a readable file")
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
        store: dict[bytes | str, bytes | str] = {
            "client_keytab": path,
            "ccache": f"MEMORY:submarine-{os.getpid()}-{secrets.token_hex(8)}",
        }
        try:
            creds = gssapi.Credentials(name=name, usage="initiate", store=store)
        except gssapi.exceptions.GSSError as exc:
            who = principal or "its first principal"
            raise YarnAuthError(
                f"cannot log in as {who} from keytab {path} (is it in the keytab? klist -k lists them): "
                f"{exc.gen_message()}"
            ) from exc
    return _PerThread(
        lambda: requests_gssapi.HTTPSPNEGOAuth(
            mutual_authentication=requests_gssapi.REQUIRED, opportunistic_auth=True, creds=creds
        )
    )


class _PerThread(requests.auth.AuthBase):
    """One ``HTTPSPNEGOAuth`` per thread, sharing the credentials: it keeps the security context of the request
    in flight per host, so two threads' requests through one client would check each other's answers (and
    refuse them) with one object."""

    def __init__(self, make: Callable[[], requests.auth.AuthBase]) -> None:
        self._make = make
        self._local = threading.local()

    def _auth(self) -> requests.auth.AuthBase:
        auth: requests.auth.AuthBase | None = getattr(self._local, "auth", None)
        if auth is None:
            auth = self._local.auth = self._make()
        return auth

    @property
    def mutual_authentication(self) -> object:
        return getattr(self._auth(), "mutual_authentication", None)

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return self._auth()(r)


def _mutual_auth_failed(exc: BaseException) -> bool:
    from requests_gssapi.exceptions import MutualAuthenticationError  # type: ignore[import-not-found,unused-ignore]

    return isinstance(exc, MutualAuthenticationError)


def refuse_cookies(session: requests.Session) -> requests.Session:
    """Make ``session`` keep and send no cookie, so that every request is authenticated anew (what mutual
    authentication with :func:`spnego_auth` needs: Hadoop answers a ``hadoop.auth`` cookie without proving
    itself). Returns the session."""
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return session


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


def _diagnostics(resp: requests.Response) -> tuple[str | None, bool]:
    """The error text of an RM answer, and whether the body was JSON (the API's own answer)."""
    try:
        data = resp.json()
    except ValueError:
        text = resp.text.strip()
        return (text[:500] or None), False
    if isinstance(data, dict):
        if data.get("diagnostics") is not None:
            return str(data["diagnostics"]), True
        remote = data.get("RemoteException")  # errors of the /ws/v1 cluster API
        if isinstance(remote, dict) and remote.get("message") is not None:
            return str(remote["message"]), True
        return None, True
    return None, True


def _was_retried(resp: requests.Response) -> bool:
    """True when urllib3 sent this request more than once: an earlier attempt may have been applied."""
    retries = getattr(resp.raw, "retries", None)
    return bool(getattr(retries, "history", ()))


class YarnServiceClient(ServiceBackend):
    """Client of one ResourceManager's YARN Services API.

    Every method blocks for one HTTP request (plus urllib3's retries, each bounded by ``timeout``)
    unless it says it waits; every wait has a timeout and raises :class:`YarnTimeoutError` naming
    what it waited for and the last state seen. Waits poll every ``poll_interval`` seconds using the
    injected ``clock`` and ``sleep``.

    Targets recorded by :meth:`set_target` are guarded by a lock; HTTP goes through one shared
    ``requests.Session``, so give each thread that polls at a high rate its own client. Waits and
    :meth:`reconcile` poll with ``tenacity``, stopping on the injected ``clock``.

    Args:
        rm_url: ResourceManager web address, e.g. ``http://localhost:8088``.
        user: user for simple auth, sent as ``user.name`` on every request; default
            :func:`submarine_elastic.env.yarn_user`. Ignored with kerberos.
        auth: ``"simple"`` or ``"kerberos"`` (SPNEGO via requests-gssapi, mutual authentication required:
            :func:`spnego_auth`); default :func:`submarine_elastic.env.yarn_auth`.
        keytab, principal: with kerberos, log in from this keytab as this principal (default
            :func:`submarine_elastic.env.yarn_keytab` and :func:`~submarine_elastic.env.yarn_principal`);
            no keytab: the user's credentials cache (``kinit``).
        session: the HTTP edge. When None, :func:`build_session` makes one with ``retries`` and
            ``backoff``; an injected session is used as given (its own retry policy, if any; with
            kerberos, its cookies refused: :func:`refuse_cookies`).
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
        mode = (auth if auth is not None else env.yarn_auth()).lower()
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
                keytab=keytab if keytab is not None else env.yarn_keytab(),
                principal=principal if principal is not None else env.yarn_principal(),
            )
        else:
            self.user = user if user is not None else env.yarn_user()
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
        self._targets: dict[tuple[str, str], ComponentTarget] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, default_url: str | None = None, **kwargs: Any) -> YarnServiceClient:
        """A client for ``SUBMARINE_RM_URL`` (else ``default_url``); other settings as in the constructor.

        Raises:
            ValueError: neither ``SUBMARINE_RM_URL`` nor ``default_url`` is set, or a bad argument.
            KerberosUnavailableError: as the constructor.
        """
        url = env.rm_url() or default_url
        if url is None:
            raise ValueError("no ResourceManager address: set SUBMARINE_RM_URL or pass default_url")
        return cls(url, **kwargs)

    def close(self) -> None:
        """Close the HTTP sessions if this client created them."""
        if self._owns_session:
            self._session.close()
            self._bounded_session.close()

    def __enter__(self) -> YarnServiceClient:
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

        Inside :meth:`reconcile` the request waits at most what is left of its timeout (at least
        ``_MIN_REQUEST_S``) and is not sent again after a read timeout.

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
            if self._auth is not None and _mutual_auth_failed(exc):
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

    def _error(self, method: str, path: str, resp: requests.Response) -> YarnError:
        status = resp.status_code
        diag, is_json = _diagnostics(resp)
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
        path = self._service_path(name)
        for attempt in range(SPEC_REWRITE_RETRIES + 1):
            try:
                resp = self._request("GET", path)
                break
            except YarnRequestError as exc:
                rewriting = exc.status_code == 500 and _SPEC_BEING_WRITTEN in (exc.diagnostics or "")
                if not rewriting or attempt == SPEC_REWRITE_RETRIES:
                    raise
                self._sleep(SPEC_REWRITE_RETRY_S)
        try:
            data = resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {path}: answer is not JSON: {resp.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise YarnRequestError(f"GET {path}: expected a JSON object, got {type(data).__name__}")
        return ServiceStatus.from_json(data)

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
        resp = self._request("GET", _APPS, params=params)
        try:
            data = resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {_APPS}: answer is not JSON: {resp.text[:200]!r}") from exc
        apps = (data.get("apps") or {}) if isinstance(data, dict) else {}
        items = apps.get("app") or [] if isinstance(apps, dict) else []
        summaries = [AppSummary.from_json(a) for a in items if isinstance(a, Mapping)]
        return sorted(summaries, key=lambda a: (a.name, a.id))

    def nodes(self, states: Sequence[str] = ("RUNNING",)) -> builtins.list[NodeReport]:
        """NodeManagers known to the RM in ``states`` (``/ws/v1/cluster/nodes``), sorted by id. Blocks for
        one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        params = {"states": ",".join(s.upper() for s in states)} if states else None
        resp = self._request("GET", _NODES, params=params)
        try:
            data = resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {_NODES}: answer is not JSON: {resp.text[:200]!r}") from exc
        nodes = (data.get("nodes") or {}) if isinstance(data, dict) else {}
        items = nodes.get("node") or [] if isinstance(nodes, dict) else []
        reports = [NodeReport.from_json(n) for n in items if isinstance(n, Mapping)]
        return sorted(reports, key=lambda n: n.node_id)

    def queues(self) -> builtins.list[QueueReport]:
        """The scheduler's leaf queues (``/ws/v1/cluster/scheduler``), with their capacities, use and pending
        requests; [] where the scheduler has no queues. Blocks for one request.

        Raises:
            RMUnreachableError, YarnAuthError, YarnRequestError: as for any request.
        """
        resp = self._request("GET", _SCHEDULER)
        try:
            data = resp.json()
        except ValueError as exc:
            raise YarnRequestError(f"GET {_SCHEDULER}: answer is not JSON: {resp.text[:200]!r}") from exc
        return leaf_queues(data)

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
        diag, _ = _diagnostics(resp)
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
            if not (missing_ok or _was_retried(resp)):
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

    def reconcile(self, name: str, component: str, n: int | None = None, *, timeout: float = 300.0) -> ReconcileResult:
        """Read the state back until ``component`` matches its target, for at most ``timeout`` s, acting
        when the RM's state differs from it.

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
        run = _Reconciliation(self, name, component, target, self._clock)
        self._deadline.at = self._clock() + timeout
        try:
            return self._poll(run.step, timeout, run.timed_out)
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
        if status.state not in _RUNNING_STATES:
            message = f"cannot {action} {status.describe()}: it is not running{said}"
            return _narrow(ServiceStateError, message, exc)
        return exc


class _Reconciliation:
    """One call of :meth:`YarnServiceClient.reconcile`: what it read last, what it sent, what failed."""

    def __init__(
        self, client: YarnServiceClient, name: str, component: str, target: ComponentTarget, clock: Callable[[], float]
    ) -> None:
        self.client, self.name, self.component, self.target, self.clock = client, name, component, target, clock
        self.start = clock()
        self.last: ServiceStatus | None = None
        self.transient: YarnError | None = None
        self.flexed = False
        self.decommissioned: tuple[str, ...] = ()
        self.reads_since_sent = _REFLEX_AFTER_POLLS  # the first read may act at once

    def step(self) -> ReconcileResult | None:
        """Read the state once and act on it; the result when reconciliation is over, else None."""
        try:
            self.last = self.client.status(self.name)
            self.transient = None
            comp = self.last.component(self.component)
            if comp is None and self.last.components:
                missing = ComponentNotFoundError(f"service {self.name!r} has no component {self.component!r}")
                return self.result(False, missing)
            if self.last.is_terminal:
                return self.result(False, ServiceStateError(f"cannot reconcile: {self.last.describe()}"))
            if comp is None:
                return None  # the AM does not report components yet
            listed = {c.component_instance_name for c in comp.containers}
            going = [i for i in self.target.remove if i in listed]
            count = self.target.count
            if not going and comp.number_of_containers == count == comp.ready_count == len(comp.containers):
                return self.result(True, None)
            self.reads_since_sent += 1
            if self.last.state in _RUNNING_STATES and self.reads_since_sent >= _REFLEX_AFTER_POLLS:
                undecided = [i for i in going if i not in comp.decommissioned]
                if undecided:
                    self.client.decommission(self.name, self.component, undecided)
                    self.decommissioned = tuple(dict.fromkeys((*self.decommissioned, *undecided)))
                    self.reads_since_sent = 0
                elif comp.number_of_containers != count:
                    self.client.flex(self.name, self.component, count)
                    self.flexed = True
                    self.reads_since_sent = 0
        except _TRANSIENT as exc:
            self.transient = exc
        except YarnError as exc:
            return self.result(False, exc)
        return None

    def timed_out(self) -> ReconcileResult:
        seen = self.last.describe() if self.last is not None else "nothing read"
        why = f"; last error: {self.transient}" if self.transient is not None else ""
        gone = f" without {', '.join(self.target.remove)}" if self.target.remove else ""
        message = (
            f"timed out after {self.clock() - self.start:g}s waiting for {self.target.count} READY "
            f"{self.component} containers{gone} of service {self.name!r}; last state: {seen}{why}"
        )
        return self.result(False, YarnTimeoutError(message, last_state=self.last))

    def result(self, converged: bool, error: YarnError | None) -> ReconcileResult:
        comp = self.last.component(self.component) if self.last is not None else None
        ready = comp.ready_containers if comp is not None else ()
        return ReconcileResult(
            service=self.name,
            component=self.component,
            target=self.target.count,
            desired=comp.number_of_containers if comp is not None else None,
            ready=len(ready),
            ready_instances=tuple(c.component_instance_name for c in ready),
            service_state=self.last.state if self.last is not None else None,
            converged=converged,
            flexed=self.flexed,
            decommissioned=self.decommissioned,
            error=error,
            elapsed_s=self.clock() - self.start,
        )
