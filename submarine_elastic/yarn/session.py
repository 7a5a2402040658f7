"""The HTTP edge of a YARN client: one ``requests`` session with urllib3's retries, and SPNEGO (Kerberos) to the
ResourceManager's web endpoints.

Retries: urllib3 ``Retry`` on the session, with backoff, for connection errors and 502/503/504, and only for
idempotent methods (GET, PUT, DELETE). 500 is *not* retried: the services API uses it for permanent failures
("already taken", unknown component, service not running), so a retry would only delay the error. See
:func:`build_session` for why POST is never retried once it may have been sent.
"""

from __future__ import annotations

import http.cookiejar
import os
import secrets
import threading
from collections.abc import Callable

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from .api import KerberosUnavailableError, YarnAuthError

__all__ = [
    "DEFAULT_HTTP_TIMEOUT",
    "IDEMPOTENT_METHODS",
    "RETRY_STATUSES",
    "build_session",
    "diagnostics",
    "mutual_auth_failed",
    "refuse_cookies",
    "spnego_auth",
    "was_retried",
]

#: (connect, read) seconds for one HTTP request. DELETE stops the service synchronously, which the
#: RM bounds at about 10 s before it kills the application, so the read timeout stays well above that.
DEFAULT_HTTP_TIMEOUT: tuple[float, float] = (5.0, 60.0)
#: Methods whose repetition cannot change the outcome; only these are retried after being sent.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Gateway / unavailable answers (a proxy, a restarting or standby RM). Not 500: see the module doc.
RETRY_STATUSES = (502, 503, 504)


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
    ``MutualAuthenticationError``, which the YARN client raises as :class:`YarnAuthError`. The token goes with
    the first request (no 401 round trip first).

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


def mutual_auth_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is requests-gssapi's refusal of an answer that did not prove the server's key."""
    from requests_gssapi.exceptions import MutualAuthenticationError  # type: ignore[import-not-found,unused-ignore]

    return isinstance(exc, MutualAuthenticationError)


def refuse_cookies(session: requests.Session) -> requests.Session:
    """Make ``session`` keep and send no cookie, so that every request is authenticated anew (what mutual
    authentication with :func:`spnego_auth` needs: Hadoop answers a ``hadoop.auth`` cookie without proving
    itself). Returns the session."""
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return session


def diagnostics(resp: requests.Response) -> tuple[str | None, bool]:
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


def was_retried(resp: requests.Response) -> bool:
    """True when urllib3 sent this request more than once: an earlier attempt may have been applied."""
    retries = getattr(resp.raw, "retries", None)
    return bool(getattr(retries, "history", ()))
