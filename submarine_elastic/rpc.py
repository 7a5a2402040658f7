"""gRPC plumbing every client and server of the project shares: channels, bearer tokens, authentication.

The metrics service, the controller and a job's driver check callers with one interceptor
(:class:`BearerTokenInterceptor`) and serve TLS with :class:`ServerTls`; the hooks' sender, the job agents
and ``submarine job`` open their channels and attach their token with :func:`open_channel` and
:func:`bearer`. A channel is TLS unless plaintext is asked for: without a CA it is refused, not opened in the
clear.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

#: Methods any caller may use without a token: health checks (a load balancer, ``grpc_health_probe``).
PUBLIC_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)

# Keepalive of long-lived streams (a job agent's ``Attach``). Such a stream is quiet for hours once its
# worker trains, and TCP alone notices a peer that vanished without a FIN or RST (a partition, a host
# that lost power) only after its retransmissions give up, some 15 minutes. So both ends ping the other
# over HTTP/2 and end the connection when a ping goes unanswered: the stream then fails UNAVAILABLE on
# both sides, the driver withdraws the worker from the ring and the agent stops its training process.

#: How long a connection may be silent before its side sends a keepalive ping.
KEEPALIVE_TIME_MS = 10_000
#: How long a ping may wait for its acknowledgement before the connection is declared dead.
KEEPALIVE_TIMEOUT_MS = 5_000
#: A silently partitioned peer is noticed within this bound (one silent interval, then an unanswered ping).
PARTITION_NOTICED_WITHIN_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000
#: The server accepts a client's pings this often when no data flows (gRPC's default is once in 5 minutes,
#: and a client pinging faster is sent GOAWAY "too_many_pings"): half the clients' interval, for slack.
MIN_PING_INTERVAL_WITHOUT_DATA_MS = KEEPALIVE_TIME_MS // 2
#: A connection with no call in flight (a CLI's or the controller's channel left open) is closed after this.
MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000

#: Channel options for a client holding a long-lived stream (a job agent's channel to its driver).
STREAM_KEEPALIVE_CLIENT_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # gRPC core waits this long for any ping's acknowledgement (keepalive pings included): one minute by
    # default, which would override the keepalive timeout above.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # A quiet stream sends no data frames; gRPC's default stops pinging after two pings without data.
    ("grpc.http2.max_pings_without_data", 0),
)

#: Server options for a server holding long-lived streams (a job's driver): it pings its clients on the same
#: schedule, accepts their pings, and closes connections that carry no call.
STREAM_KEEPALIVE_SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_WITHOUT_DATA_MS),
    ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
)


class InsecureChannelError(ValueError):
    """A client has no CA to check its server against and was not told plaintext is meant."""


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS: its certificate chain and key (PEM) and, when ``client_ca`` is given, mutual TLS:
    a client must present a certificate that CA issued, or the handshake fails before any call."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None

    def __repr__(self) -> str:  # never show the key
        return f"ServerTls(key=***, mutual={self.client_ca is not None})"

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.client_ca, require_client_auth=self.client_ca is not None
        )


def open_channel(
    target: str,
    *,
    ca: bytes | None = None,
    tls: bool = False,
    client_cert: tuple[bytes, bytes] | None = None,
    server_name: str | None = None,
    insecure: bool = False,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to ``target`` (``host:port``). Opens no connection yet.

    TLS when ``ca`` is given (trusting those certificates) or ``tls`` is set (trusting the system's),
    presenting ``client_cert`` (certificate chain and key, PEM) when given and checking the server's
    certificate for ``server_name`` instead of the host dialled when given. Plaintext only when asked for
    with ``insecure``: a client left without a CA never falls back to sending its token in the clear.

    Raises:
        InsecureChannelError: neither a CA, nor ``tls``, nor ``insecure``.
    """
    if ca is not None or tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=client_cert[1] if client_cert else None,
            certificate_chain=client_cert[0] if client_cert else None,
        )
        named = (("grpc.ssl_target_name_override", server_name),) if server_name else ()
        return grpc.secure_channel(target, credentials, options=(*options, *named))
    if insecure:
        return grpc.insecure_channel(target, options=options)
    raise plaintext_refused(target)


def plaintext_refused(target: str) -> InsecureChannelError:
    """The error of a client that would have to reach ``target`` in plaintext without being told to."""
    return InsecureChannelError(
        f"no CA to check the server at {target} against, so nothing is sent to it: TLS is the default. "
        "Give the CA (or use the system's), or ask for plaintext with --insecure or SUBMARINE_INSECURE=1"
    )


def dial_address(host: str, port: int) -> str:
    """``host:port`` a client on this machine dials for a server bound to ``host`` (loopback for a
    wildcard bind)."""
    return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '[::]', '') else host}:{port}"


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` (none without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """The one check of every server's callers: answers ``UNAUTHENTICATED`` (with ``refusal``) unless the call
    carries ``authorization: Bearer <token>``, or, given ``accepts`` instead of a token, a credential it
    accepts (the metrics service's operator token or a job's own credential).

    Health checking stays open to everyone (see ``PUBLIC_METHOD_PREFIXES``); every other method of the
    server is refused before its handler reads the request. A token is compared in constant time, and
    ``accepts`` must compare so too.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        accepts: Callable[[Sequence[tuple[str, Any]] | None], bool] | None = None,
        refusal: str = "missing or wrong bearer token",
    ) -> None:
        """Raises:
        ValueError: ``token`` is empty or has characters gRPC metadata cannot carry, or not exactly one of
            ``token`` and ``accepts`` is given.
        """
        if (token is None) == (accepts is None):
            raise ValueError("give the interceptor a token or an accepts check, one of them")
        if token is not None:
            check_token(token)
            expected = f"Bearer {token}".encode()

            def accepts(metadata: Sequence[tuple[str, Any]] | None) -> bool:
                return hmac.compare_digest(authorization(metadata), expected)

        assert accepts is not None
        self._accepts = accepts
        self._refusal = refusal

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        if method.startswith(PUBLIC_METHOD_PREFIXES) or self._accepts(handler_call_details.invocation_metadata):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        return None if handler is None else _denying(handler, self._refusal)


def authorization(metadata: Sequence[tuple[str, Any]] | None) -> bytes:
    """The value of a call's ``authorization`` metadata (b'' when it has none)."""
    for key, value in metadata or ():
        if key == "authorization":
            return value.encode() if isinstance(value, str) else bytes(value)
    return b""


def check_token(token: str) -> None:
    """Raises:
    ValueError: ``token`` is empty or has characters gRPC metadata cannot carry.
    """
    if not token or not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError("a bearer token must be non-empty printable ASCII without spaces")


def _denying(handler: grpc.RpcMethodHandler, refusal: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that rejects the call with ``refusal`` without reading it."""

    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)
