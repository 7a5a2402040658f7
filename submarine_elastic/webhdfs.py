"""A small client of HDFS's WebHDFS REST API (``/webhdfs/v1`` on the NameNode's web port), as one user.

What the project puts on a cluster's HDFS goes through here: ``cluster up`` making the users' home
directories and uploading the ApplicationMaster's jar archive, ``job run`` writing a job's files
(``submit.jobfiles``), ``job kill`` removing them. Simple auth: every request names its user with
``?user.name=`` (the cluster refuses anonymous requests), and HDFS checks that user's permissions.

A file is written in WebHDFS's two steps: the NameNode answers ``CREATE`` with a redirect to a DataNode,
which takes the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any
from urllib.parse import urlsplit

import requests

from submarine_elastic.yarn import hadoop_connection_failed, refuse_cookies

#: (connect, read) seconds of every WebHDFS request: the NameNode answers metadata calls at once; a
#: DataNode takes the bytes of a file within the read timeout (the jar archive, 85 MB, takes seconds).
WEBHDFS_TIMEOUT = (5.0, 120.0)
#: The Java exceptions HDFS reports when it is away or starting, not refusing (:attr:`WebHdfsError.unavailable`).
UNAVAILABLE_EXCEPTIONS = frozenset(
    {"ConnectException", "SocketException", "SocketTimeoutException", "EOFException", "NoRouteToHostException",
     "SafeModeException", "RetriableException", "StandbyException"}
)  # fmt: skip
#: The DataNodes a file's write tries, each named by the NameNode with the ones that did not answer excluded.
CREATE_DATANODES = 3


class WebHdfsError(Exception):
    """A WebHDFS request failed: the NameNode or a DataNode refused it (its ``RemoteException`` message and
    the HTTP status) or did not answer (``status_code`` None).

    Attributes:
        status_code: the HTTP status, or None when nothing answered.
        exception: the Java exception's simple name HDFS reported (``AccessControlException``), or None.
    """

    def __init__(self, message: str, *, status_code: int | None = None, exception: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.exception = exception

    @property
    def unavailable(self) -> bool:
        """HDFS is away, not refusing: nothing answered, or a DataNode could not reach the NameNode (Hadoop's
        "Call From A to B failed on ..." of a connection lost), or the NameNode is starting (safe mode). A
        later try may succeed; a refusal (``AccessControlException``, a path that exists) never does."""
        return (
            self.status_code is None or self.exception in UNAVAILABLE_EXCEPTIONS or hadoop_connection_failed(str(self))
        )


class WebHdfs:
    """WebHDFS of the NameNode at ``url`` (``http://host:port``), acting as ``user``.

    Every call blocks for one or two HTTP requests, each bounded by :data:`WEBHDFS_TIMEOUT`.

    Raises:
        ValueError: ``url`` is not an http(s) address, or ``user`` is empty.
    """

    def __init__(self, url: str, user: str, *, session: requests.Session | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"WebHDFS url must be http(s)://host:port, got {url!r}")
        if not user:
            raise ValueError("WebHDFS needs a user name (simple auth)")
        self.url = url.rstrip("/")
        self.user = user
        self._session = session or refuse_cookies(requests.Session())

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> WebHdfs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls

    def mkdirs(self, path: str, permission: int) -> None:
        """Make ``path`` and its missing parents, with mode ``permission`` (octal bits, e.g. ``0o700``).

        Raises:
            WebHdfsError: refused (a parent not writable by the user), or no answer.
        """
        self._call("PUT", path, "MKDIRS", permission=f"{permission:o}")

    def create(self, path: str, data: bytes | IO[bytes], permission: int) -> None:
        """Write ``data`` to ``path`` with mode ``permission``, replacing a file there. A DataNode the NameNode
        names that does not answer (dead, but not yet declared so: the NameNode takes minutes) is excluded and
        the NameNode asked again, for up to :data:`CREATE_DATANODES` DataNodes, as Hadoop's own WebHDFS client
        does.

        Raises:
            WebHdfsError: refused, or no answer.
        """
        excluded: list[str] = []
        while True:
            where = self._call(
                "PUT", path, "CREATE", permission=f"{permission:o}", overwrite="true", redirect=False,
                **({"excludedatanodes": ",".join(excluded)} if excluded else {}),
            ).headers.get("Location")  # fmt: skip
            if not where:
                raise WebHdfsError(f"WebHDFS CREATE {path}: the NameNode named no DataNode to write to")
            if hasattr(data, "seek"):
                data.seek(0)
            try:
                self._send("PUT", where, f"CREATE {path}", data=data, expect=201)
                return
            except WebHdfsError as exc:
                host = urlsplit(where).hostname
                if exc.status_code is not None or host is None or len(excluded) + 1 >= CREATE_DATANODES:
                    raise
                excluded.append(host)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Remove ``path`` (a directory with what it holds when ``recursive``). Returns False when it did not exist.

        Raises:
            WebHdfsError: refused, or no answer.
        """
        return bool(self._call("DELETE", path, "DELETE", recursive=str(recursive).lower()).json().get("boolean"))

    def set_permission(self, path: str, permission: int) -> None:
        """Set ``path``'s mode (octal bits).

        Raises:
            WebHdfsError: refused, or no answer.
        """
        self._call("PUT", path, "SETPERMISSION", permission=f"{permission:o}")

    def status(self, path: str) -> dict[str, Any] | None:
        """``path``'s ``FileStatus`` (owner, permission as octal text, length, type), None when it does not exist.

        Raises:
            WebHdfsError: refused, or no answer.
        """
        try:
            return dict(self._call("GET", path, "GETFILESTATUS").json()["FileStatus"])
        except WebHdfsError as exc:
            if exc.exception == "FileNotFoundException":
                return None
            raise

    def list(self, path: str) -> dict[str, dict[str, Any]]:
        """The entries of directory ``path``: name -> ``FileStatus``.

        Raises:
            WebHdfsError: refused (``AccessControlException``), no such directory, or no answer.
        """
        entries = self._call("GET", path, "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
        return {e["pathSuffix"]: e for e in entries}

    def read(self, path: str) -> bytes:
        """The bytes of file ``path``.

        Raises:
            WebHdfsError: refused (``AccessControlException``, HTTP 403), no such file, or no answer.
        """
        where = self._call("GET", path, "OPEN", redirect=False).headers.get("Location")
        if not where:
            raise WebHdfsError(f"WebHDFS OPEN {path}: the NameNode named no DataNode to read from")
        return self._send("GET", where, f"OPEN {path}", expect=200).content

    # ------------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, op: str, *, redirect: bool = True, **params: str) -> requests.Response:
        if not path.startswith("/"):
            raise ValueError(f"an HDFS path must be absolute, got {path!r}")
        query: Mapping[str, str] = {"op": op, "user.name": self.user, **params}
        expect = 307 if not redirect else 200
        return self._send(method, f"{self.url}/webhdfs/v1{path}", f"{op} {path}", params=query, expect=expect)

    def _send(
        self,
        method: str,
        url: str,
        what: str,
        *,
        expect: int,
        params: Mapping[str, str] | None = None,
        data: bytes | IO[bytes] | None = None,
    ) -> requests.Response:
        try:
            resp = self._session.request(
                method, url, params=params, data=data, timeout=WEBHDFS_TIMEOUT, allow_redirects=False
            )
        except requests.RequestException as exc:
            raise WebHdfsError(f"WebHDFS {what}: no answer from {url.split('?')[0]}: {exc}") from exc
        if resp.status_code != expect:
            raise _refused(what, resp)
        return resp


def _refused(what: str, resp: requests.Response) -> WebHdfsError:
    """The error of a refused request, with HDFS's own message (``RemoteException``) when it sent one."""
    try:
        remote = resp.json()["RemoteException"]
        message, exception = str(remote.get("message", "")), str(remote.get("exception", "")) or None
    except (ValueError, KeyError, TypeError):
        message, exception = resp.text[:300].strip(), None
    return WebHdfsError(
        f"WebHDFS {what} refused (HTTP {resp.status_code}): {message}",
        status_code=resp.status_code,
        exception=exception,
    )
