"""Talking to a running job's driver: its control plane (flex, status), found through YARN or at its last
known address, with the token and certificates the job's store (``submit.store``) keeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from submarine_elastic.protocol.api import DriverUnreachableError, FlexRefusedError, JobPhase
from submarine_elastic.protocol.locate import driver_address
from submarine_elastic.submit.store import (
    is_insecure,
    load_client_cert,
    load_server_name,
    load_tls_ca,
    load_token,
    remember_driver,
)
from submarine_elastic.yarn import YarnServiceClient

if TYPE_CHECKING:
    import grpc
    from tenacity import RetryCallState

    from submarine_elastic.protocol.proto import elastic_pb2 as pb


#: How long a failed call's error waits to see whether the channel to the driver is connected.
CONNECTED_WITHIN_S = 1.0


class JobClient:
    """The driver of one job. Every call blocks for one RPC (at most ``timeout`` s).

    The driver is found through YARN (for up to ``locate_timeout`` s), or at ``address`` when given
    (``submarine job show`` passes the last known one while the ResourceManager is down). It is reached
    over mutual TLS with the certificates ``job run`` kept in the job's directory, in plaintext only for a
    job run ``--insecure``.

    Raises:
        DriverUnreachableError: the driver cannot be found or does not answer, or the job's directory holds
            no CA to check it against (nothing is sent then).
    """

    def __init__(
        self,
        job: str,
        yarn: YarnServiceClient | None,
        *,
        timeout: float = 30.0,
        locate_timeout: float = 60.0,
        address: str | None = None,
    ):
        self.job = job
        self.timeout = timeout
        if address is not None:
            target = address
        elif yarn is None:
            raise DriverUnreachableError(f"driver of {job}: no address and no ResourceManager to find it")
        else:
            target = driver_address(job, client=yarn, timeout=locate_timeout)
            remember_driver(job, target)
        self.address = target
        # gRPC (about 60 ms to import) only once a driver is to be asked: `job show` of a job that ended,
        # or whose driver is unknown, never loads it.
        from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
        from submarine_elastic.rpc import bearer, open_channel

        token = load_token(job)
        self._metadata = bearer(token)
        from submarine_elastic.rpc import InsecureChannelError

        try:
            self._channel = open_channel(
                target,
                ca=load_tls_ca(job),
                client_cert=load_client_cert(job),
                server_name=load_server_name(job),
                insecure=is_insecure(job),
            )
        except InsecureChannelError as exc:
            # Its directory has no CA and the job was not run --insecure: nothing is sent, the token least.
            raise DriverUnreachableError(f"driver of {job}: {exc}") from exc
        self._stub = pb_grpc.ElasticDriverStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> pb.JobStatus:
        import grpc

        from submarine_elastic.protocol.proto import elastic_pb2 as pb

        try:
            # wait_for_ready: a driver whose container runs but whose server is not up yet is waited for.
            return self._stub.Status(
                pb.StatusRequest(), metadata=self._metadata, timeout=self.timeout, wait_for_ready=True
            )
        except grpc.RpcError as exc:
            raise self._unreachable(exc) from exc

    def set_target(self, target: pb.Target) -> pb.FlexReply:
        """Give the job's driver a new target (worker count, instances to remove, and optionally a batch: global
        batch, accumulation steps, learning rate); returns at once with the version the driver gave it (the
        resize runs in the driver; its workers take a batch at their next commit). The one way every writer
        (``job flex``, the controller, a replacement) changes a running job.

        Raises:
            FlexRefusedError: outside the job's limits (workers or batch), or unknown instances to remove.
            DriverUnreachableError: as the class.
        """
        import grpc

        try:
            return self._stub.SetTarget(target, metadata=self._metadata, timeout=self.timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise FlexRefusedError(exc.details()) from exc
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: grpc.RpcError) -> DriverUnreachableError:
        """The error of a call that failed with ``exc``. Past its deadline it says which side it waited for: a
        connection to the driver that never came (``wait_for_ready`` waits through reconnects), or a driver
        that took the call and did not answer."""
        import grpc

        why = f"{exc.code().name}: {exc.details()}"
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            try:
                grpc.channel_ready_future(self._channel).result(timeout=CONNECTED_WITHIN_S)
            except grpc.FutureTimeoutError:
                why += f"; no connection to {self.address} within {self.timeout:g} s"
            else:
                why += f"; connected to {self.address}, the driver did not answer within {self.timeout:g} s"
        return DriverUnreachableError(f"driver of {self.job}: {why}")

    def wait_for_size(
        self, workers: int, timeout: float, poll: float = 0.5, *, sleep: Callable[[float], None] = time.sleep
    ) -> pb.JobStatus:
        """Block until the driver's target is ``workers`` and it says the ring is at it (that many ranks, nobody
        leaving: ``JobStatus.ring_at_target``; YARN may still catch up, ``JobStatus.converged`` says when it
        has); at most ``timeout`` s, one status read every ``poll`` s.

        Raises:
            TimeoutError: naming the last status seen (the driver's ``lag``, and why the ring has not formed, or
                why YARN has not taken the resize yet, if so).
            FlexRefusedError: the job failed meanwhile (with its reason).
            DriverUnreachableError: as the class.
        """
        from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

        def settled(st: pb.JobStatus) -> bool:
            return st.target == workers and st.ring_at_target

        def read() -> pb.JobStatus:
            st = self.status()
            if not settled(st) and st.phase == JobPhase.FAILED.wire:
                raise FlexRefusedError(f"job {self.job} failed: {st.error or 'see submarine job show'}")
            return st

        def timed_out(state: RetryCallState) -> pb.JobStatus:
            assert state.outcome is not None  # tenacity calls this after an attempt
            st: pb.JobStatus = state.outcome.result()
            lag = st.lag if st.target == workers else f"the driver's target is {st.target}"
            why = f"; {st.error}" if st.error else ""
            raise TimeoutError(
                f"job {self.job} did not reach {workers} workers within {timeout:.0f} s "
                f"(world size {st.world_size}, target {st.target}: {lag or 'converging'}){why}"
            )

        retrying = Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_fixed(poll),
            retry=retry_if_result(lambda st: not settled(st)),
            retry_error_callback=timed_out,
            sleep=sleep,
        )
        return retrying(read)
