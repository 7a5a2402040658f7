"""One authentication for every gRPC server of the project: the metrics service, the controller and a job's
driver refuse a call without the right bearer token, on a real server bound to port 0."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import BearerTokenInterceptor, authorization, bearer, check_token, open_channel

TOKEN = "job-token-1234567890"


@pytest.fixture()
def driver_stub() -> Iterator[pb_grpc.ElasticDriverStub]:
    driver = JobDriver("job", Limits(2, 1, 3), yarn=None, token=TOKEN, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = driver.serve(0)
    assert served is not None
    server, port = served
    with open_channel(f"127.0.0.1:{port}", insecure=True) as channel:
        yield pb_grpc.ElasticDriverStub(channel)
    server.stop(None)


@pytest.mark.parametrize("token", [None, "wrong-token-1234567890", TOKEN[:-1], TOKEN + "0"])
def test_the_driver_refuses_a_call_without_its_token(driver_stub: pb_grpc.ElasticDriverStub, token: str | None) -> None:
    for call, request in ((driver_stub.Status, pb.StatusRequest()), (driver_stub.SetTarget, pb.Target(workers=3))):
        with pytest.raises(grpc.RpcError) as caught:
            call(request, metadata=bearer(token), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_driver_answers_with_its_token(driver_stub: pb_grpc.ElasticDriverStub) -> None:
    status = driver_stub.Status(pb.StatusRequest(), metadata=bearer(TOKEN), timeout=5)
    assert status.target == 2


def test_a_token_gRPC_metadata_cannot_carry_is_refused_by_name() -> None:
    for bad in ("", "has space", "tab\there", "é-token"):
        with pytest.raises(ValueError, match="bearer token"):
            check_token(bad)
        with pytest.raises(ValueError, match="bearer token"):
            BearerTokenInterceptor(bad)


def test_no_token_no_metadata() -> None:
    assert bearer(None) == ()
    assert bearer("t") == (("authorization", "Bearer t"),)


def test_the_interceptor_takes_a_token_or_a_check_and_refuses_with_its_message() -> None:
    with pytest.raises(ValueError, match="a token or an accepts check"):
        BearerTokenInterceptor()
    with pytest.raises(ValueError, match="a token or an accepts check"):
        BearerTokenInterceptor("t0ken", accepts=lambda metadata: True)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        interceptors=[
            BearerTokenInterceptor(accepts=lambda md: authorization(md) == b"Bearer job-a.mac", refusal="not you")
        ],
    )
    server.add_generic_rpc_handlers((_echo_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            echo = channel.unary_unary("/test.Echo/Say")
            assert echo(b"hi", metadata=(("authorization", "Bearer job-a.mac"),), timeout=5) == b"hi"
            with pytest.raises(grpc.RpcError) as refused:
                echo(b"hi", metadata=(("authorization", "Bearer job-b.mac"),), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert refused.value.details() == "not you"
    finally:
        server.stop(None)


def _echo_handler() -> grpc.GenericRpcHandler:
    say = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    return grpc.method_handlers_generic_handler("test.Echo", {"Say": say})
