"""The job driver's gRPC face (``elastic.proto``'s ``ElasticDriver``): it checks what arrives and hands it on.

1. ``Attach``: an agent's stream. Its first event must be a valid Hello (:func:`hello_problems`, else
   ``INVALID_ARGUMENT``); the driver then admits or refuses it (``FAILED_PRECONDITION``, with why), or takes
   back an agent that lost its previous stream; its events are read on a thread of their own and handed to the
   driver, and the driver's commands to it are the stream's replies until the driver ends it (or the agent
   re-attaches on another stream).
2. ``SetTarget``: a target the driver takes (``INVALID_ARGUMENT`` naming what is wrong with one it refuses).
3. ``Status``: the driver's :meth:`~submarine_elastic.elastic.driver.JobDriver.status`.

Nothing here decides anything about the job; :class:`~submarine_elastic.elastic.driver.JobDriver` does.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Protocol

import grpc

from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.limits import MAX_AGENT_FIELD_LENGTH, WORKER_INSTANCE
from submarine_elastic.protocol.api import FlexRefusedError, Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import STREAM_KEEPALIVE_SERVER_OPTIONS, BearerTokenInterceptor, ServerTls

log = logging.getLogger("submarine_elastic.driver")


class ServedDriver(Protocol):
    """What the servicer asks of the job's driver (:class:`~submarine_elastic.elastic.driver.JobDriver`)."""

    def attach(self, agent: AgentHandle, resume: pb.Resume | None) -> tuple[AgentHandle, str]:
        """Registers an agent (or takes back one that lost its stream): the handle its stream serves, and why it
        is refused ('' when it is not)."""
        ...

    def on_event(self, agent: AgentHandle, event: pb.AgentEvent) -> None:
        """One event of an attached agent's stream."""
        ...

    def detach(self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None]) -> None:
        """The agent's stream whose replies were ``commands`` ended."""
        ...

    def take_target(self, target: pb.Target) -> tuple[pb.Target, int]:
        """The target as taken and the worker count before it.

        Raises:
            FlexRefusedError: it is refused (naming why).
        """
        ...

    def status(self) -> pb.JobStatus:
        """The job's status now."""
        ...


def hello_problems(hello: pb.Hello) -> list[str]:
    """What is wrong with an agent's Hello (empty: nothing), each naming the field: an instance name without its
    number (it would fail every Status and resize after), a field longer than
    :data:`~submarine_elastic.limits.MAX_AGENT_FIELD_LENGTH`, or neither an agent nor a container id."""
    instance_problem = WORKER_INSTANCE.problem(hello.instance)
    problems = [] if instance_problem is None else [instance_problem]
    for what, value in (
        ("container_id", hello.container_id),
        ("host", hello.host),
        ("agent_id", hello.agent_id),
        ("node", hello.node),
    ):
        if len(value) > MAX_AGENT_FIELD_LENGTH:
            problems.append(f"Hello.{what} is {len(value)} characters, above {MAX_AGENT_FIELD_LENGTH}")
    if not (hello.agent_id or hello.container_id):
        problems.append("Hello names neither an agent_id nor a container_id")
    return problems


class DriverServicer(pb_grpc.ElasticDriverServicer):
    """Serves one job driver's control plane."""

    def __init__(self, driver: ServedDriver) -> None:
        self._driver = driver

    def Attach(
        self, request_iterator: Iterator[pb.AgentEvent], context: grpc.ServicerContext
    ) -> Iterator[pb.AgentCommand]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("event") != "hello":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an agent must start with Hello")
            return
        hello = first.hello
        problems = hello_problems(hello)  # refused before it is registered
        if problems:
            log.warning("refused an agent's Hello: %s", "; ".join(problems))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused Hello: " + "; ".join(problems))
            return
        agent = AgentHandle(
            hello.agent_id or hello.container_id,
            hello.instance,
            hello.container_id,
            hello.host,
            tuple(hello.gpus),
            node=hello.node,
        )
        agent, refusal = self._driver.attach(agent, hello.resume if hello.HasField("resume") else None)
        if refusal:
            log.warning("refused %s (%s): %s", agent.instance, agent.agent_id, refusal)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
            return
        commands = agent.commands  # this stream's: a re-attach gives the agent another and ends this one
        threading.Thread(target=self.read_events, args=(agent, commands, request_iterator), daemon=True).start()
        while True:
            command = commands.get()
            if command is None:
                return
            yield command

    def read_events(
        self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None], events: Iterator[pb.AgentEvent]
    ) -> None:
        """Hands each of ``agent``'s events to the driver until its stream ends (however it ends), then tells
        the driver that stream (the one replying ``commands``) is gone."""
        try:
            for event in events:
                self._driver.on_event(agent, event)
        except grpc.RpcError:
            pass
        finally:
            self._driver.detach(agent, commands)

    def SetTarget(self, request: pb.Target, context: grpc.ServicerContext) -> pb.FlexReply:
        try:
            taken, previous = self._driver.take_target(request)
        except FlexRefusedError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.FlexReply(previous=previous, target=taken.workers, message="resize queued", version=taken.version)

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.JobStatus:
        return self._driver.status()


#: gRPC threads of the control plane beyond the agents' streams: SetTarget, Status and their retries.
CONTROL_CALL_THREADS = 16


def control_plane_threads(limits: Limits) -> int:
    """The driver's gRPC threads, and the calls it serves at once: ``2 * limits.max + CONTROL_CALL_THREADS``.

    Every attached agent's ``Attach`` stream holds one thread for its whole life. A worker instance can
    have two agents attached at a time: the one YARN relaunched and the old incarnation the driver has
    not yet seen go (up to :data:`~submarine_elastic.rpc.PARTITION_NOTICED_WITHIN_S`), or a leaver that
    stays until YARN stops its container while its replacement attaches. The rest serves SetTarget and Status.
    """
    return 2 * limits.max + CONTROL_CALL_THREADS


def serve_control_plane(
    servicer: pb_grpc.ElasticDriverServicer,
    *,
    token: str | None,
    threads: int,
    port: int,
    tls: ServerTls | None = None,
    host: str = "127.0.0.1",
) -> tuple[grpc.Server, int] | None:
    """Starts ``servicer`` on ``host:port`` (port 0: any free one), TLS only given ``tls`` (mutual when it names a
    client CA). Every call needs ``token`` when it is set. Returns the server and its port, or None when the port
    cannot be bound.

    It serves ``threads`` calls at once (:func:`control_plane_threads`), every agent's stream and SetTarget and
    Status beside them; a call beyond that is refused with ``RESOURCE_EXHAUSTED`` rather than queued behind streams
    that do not end. Both ends of a stream ping each other
    (:data:`~submarine_elastic.rpc.STREAM_KEEPALIVE_SERVER_OPTIONS`), so an agent cut off without a word is
    detached within :data:`~submarine_elastic.rpc.PARTITION_NOTICED_WITHIN_S`."""
    interceptors = [BearerTokenInterceptor(token)] if token else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="driver-grpc"),
        interceptors=interceptors,
        options=STREAM_KEEPALIVE_SERVER_OPTIONS,
        maximum_concurrent_rpcs=threads,
    )
    pb_grpc.add_ElasticDriverServicer_to_server(servicer, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, tls.credentials())
    if bound == 0:
        return None
    server.start()
    return server, bound
