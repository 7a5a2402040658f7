"""Who calls the metrics service: the operator, or one job.

Two kinds of bearer credential:

- the **operator token** (``submarine metrics serve --token-file``, the controller's ``metrics.token``):
  reads every job and may report for any job (the single-token mode of earlier releases);
- a **job credential** ``<job>.<mac>``, where ``mac`` is the unpadded URL-safe base64 of
  HMAC-SHA256(service key, ``submarine-metrics-job:<job>``). It names its job, so the service needs no
  table of issued credentials: it recomputes the MAC from the job name the credential carries and
  compares in constant time. A job's credential reports and reads its own job only.

Anyone holding the service key can mint credentials, so the key stays with whoever runs the service
(the controller's ``metrics.key``, mode 0600) and never travels to a job.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from submarine_elastic.limits import JOB_NAME
from submarine_elastic.rpc import authorization, check_token

#: What the MAC covers before the job name, so a MAC made with the key for another purpose never
#: passes as a job credential.
_MAC_CONTEXT = b"submarine-metrics-job:"
#: Shortest service key taken (bytes): a key is as strong as an HMAC-SHA256 key needs to be.
MIN_SERVICE_KEY_BYTES = 16


class CredentialError(ValueError):
    """A service key or job name that cannot make a credential; the message names which."""


@dataclass(frozen=True)
class Identity:
    """A caller the service recognized. ``job_id`` None: the operator (every job)."""

    job_id: str | None = None

    def may_use(self, job_id: str) -> bool:
        """Whether this caller may report or read ``job_id``."""
        return self.job_id is None or self.job_id == job_id

    def __str__(self) -> str:
        return "the operator" if self.job_id is None else f"job {self.job_id!r}'s credential"


OPERATOR = Identity()


def _check_key(key: bytes) -> None:
    if len(key) < MIN_SERVICE_KEY_BYTES:
        raise CredentialError(
            f"the metrics service key has {len(key)} bytes; it needs at least {MIN_SERVICE_KEY_BYTES}"
        )


def _mac(key: bytes, job_id: str) -> str:
    digest = hmac.new(key, _MAC_CONTEXT + job_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def job_credential(key: bytes, job_id: str) -> str:
    """The credential of ``job_id`` under the service ``key``; the same key and job give the same one.

    Raises:
        CredentialError: ``key`` is shorter than :data:`MIN_SERVICE_KEY_BYTES` or ``job_id`` is no job name.
    """
    _check_key(key)
    if (problem := JOB_NAME.problem(job_id)) is not None:
        raise CredentialError(problem)
    return f"{job_id}.{_mac(key, job_id)}"


class Authenticator:
    """Maps a call's ``authorization`` metadata to an :class:`Identity`.

    With neither an operator token nor a key, every caller is the operator (an open service).
    """

    def __init__(self, operator_token: str | None = None, job_key: bytes | None = None) -> None:
        """Raises:
        ValueError: the token has characters gRPC metadata cannot carry, or the key is too short.
        """
        if operator_token is not None:
            check_token(operator_token)
        if job_key is not None:
            _check_key(job_key)
        self._operator = f"Bearer {operator_token}".encode() if operator_token else None
        self._key = job_key

    @property
    def open(self) -> bool:
        """True when the service checks no credential."""
        return self._operator is None and self._key is None

    def identify(self, metadata: Sequence[tuple[str, Any]] | None) -> Identity | None:
        """The caller's identity, or None when its credential is missing or wrong. Constant time in the
        credential's content."""
        if self.open:
            return OPERATOR
        given = authorization(metadata)
        if self._operator is not None and hmac.compare_digest(given, self._operator):
            return OPERATOR
        if self._key is None or not given.startswith(b"Bearer "):
            return None
        job, dot, mac = given[len(b"Bearer ") :].partition(b".")
        try:
            job_id = job.decode("ascii")
        except UnicodeDecodeError:
            return None
        if not dot or not JOB_NAME.matches(job_id):
            return None
        if hmac.compare_digest(mac, _mac(self._key, job_id).encode()):
            return Identity(job_id)
        return None
