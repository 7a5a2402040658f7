"""The job driver's gRPC face (``elastic.proto``'s ``ElasticDriver``): it checks what arrives and hands it on.

1. ``Attach``: an agent's stream. Its first event must be a valid Hello (:func:`hello_problems`, else
   ``INVALID_ARGUMENT``); the driver then admits or refuses it (``FAILED_PRECONDITION``, with why), its events
   are read on a thread of their own and handed to the driver, and the driver's commands to it are the stream's
   replies until the driver ends it.
2. ``SetTarget``: a target the driver takes (``INVALID_ARGUMENT`` naming what is wrong with one it refuses).
3. ``Status``: the driver's :meth:`~submarine_elastic.elastic.driver.JobDriver.status`.

Nothing here decides anything about the job; :class:`~submarine_elastic.elastic.driver.JobDriver` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Protocol

import grpc

from submarine_elastic.elastic.api import FlexRefusedError
from submarine_elastic.elastic.proto import elastic_pb2 as pb
from submarine_elastic.elastic.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.limits import MAX_AGENT_FIELD_LENGTH, WORKER_INSTANCE

log = logging.getLogger("submarine_elastic.driver")


class ServedDriver(Protocol):
    """What the servicer asks of the job's driver (:class:`~submarine_elastic.elastic.driver.JobDriver`)."""

    def attach(self, agent: AgentHandle, resume: pb.Resume | None) -> str:
        """Registers a new agent; why it is refused ('' when it is not)."""
        ...

    def on_event(self, agent: AgentHandle, event: pb.AgentEvent) -> None:
        """One event of an attached agent's stream."""
        ...

    def detach(self, agent: AgentHandle) -> None:
        """The agent's stream ended."""
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
        refusal = self._driver.attach(agent, hello.resume if hello.HasField("resume") else None)
        if refusal:
            log.warning("refused %s (%s): %s", agent.instance, agent.agent_id, refusal)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
            return
        threading.Thread(target=self.read_events, args=(agent, request_iterator), daemon=True).start()
        while True:
            command = agent.commands.get()
            if command is None:
                return
            yield command

    def read_events(self, agent: AgentHandle, events: Iterator[pb.AgentEvent]) -> None:
        """Hands each of ``agent``'s events to the driver until its stream ends (however it ends), then tells
        the driver the agent is gone."""
        try:
            for event in events:
                self._driver.on_event(agent, event)
        except grpc.RpcError:
            pass
        finally:
            self._driver.detach(agent)

    def SetTarget(self, request: pb.Target, context: grpc.ServicerContext) -> pb.FlexReply:
        try:
            taken, previous = self._driver.take_target(request)
        except FlexRefusedError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.FlexReply(previous=previous, target=taken.workers, message="resize queued", version=taken.version)

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.JobStatus:
        return self._driver.status()
