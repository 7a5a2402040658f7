"""gRPC plumbing every client and server of the project shares: channels, bearer tokens, authentication.

The metrics service, the controller and a job's driver check callers with one interceptor
(:class:`BearerTokenInterceptor`); the hooks' sender, the job agents and ``submarine job`` open their
channels and attach their token with :func:`open_channel` and :func:`bearer`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import Any

import grpc

#: Methods any caller may use without a token: health checks (a load balancer, ``grpc_health_probe``).
PUBLIC_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


def open_channel(
    target: str, *, ca: bytes | None = None, tls: bool = False, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    """A channel to ``target`` (``host:port``): TLS when ``ca`` is given (trusting those certificates) or
    ``tls`` is set (trusting the system's), else plaintext. Opens no connection yet."""
    if ca is not None or tls:
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca), options=options)
    return grpc.insecure_channel(target, options=options)


def dial_address(host: str, port: int) -> str:
    """``host:port`` a client on this machine dials for a server bound to ``host`` (loopback for a
    wildcard bind)."""
    return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '[::]', '') else host}:{port}"


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` (none without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Answers ``UNAUTHENTICATED`` unless the call carries ``authorization: Bearer <token>``.

    Health checking stays open to everyone (see ``PUBLIC_METHOD_PREFIXES``); every other method of the
    server is refused before its handler reads the request. The comparison takes constant time.
    """

    def __init__(self, token: str) -> None:
        """Raises:
        ValueError: ``token`` is empty or has characters gRPC metadata cannot carry.
        """
        check_token(token)
        self._expected = f"Bearer {token}".encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        if method.startswith(PUBLIC_METHOD_PREFIXES) or self._authorized(handler_call_details):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        return None if handler is None else _denying(handler)

    def _authorized(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(given, self._expected)
        return False


def check_token(token: str) -> None:
    """Raises:
    ValueError: ``token`` is empty or has characters gRPC metadata cannot carry.
    """
    if not token or not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError("a bearer token must be non-empty printable ASCII without spaces")


def _deny(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")


def _denying(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that rejects the call without reading it."""
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_deny)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_deny)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(_deny)
    return grpc.unary_unary_rpc_method_handler(_deny)
