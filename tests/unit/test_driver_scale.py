"""A job's control plane holds every worker it may have: 300 agents attach to a real driver over real
gRPC (one channel each, as in a job) and speak the agents' protocol, while ``submarine job show`` and
``flex`` keep answering; a call above the driver's bound is refused at once rather than left waiting."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest
from tenacity import AsyncRetrying, RetryError, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic.jobdriver import JobDriver, control_plane_threads
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import STREAM_KEEPALIVE_CLIENT_OPTIONS
from tests.unit._driver_support import RecordingYarn

AGENTS = 300
#: What a user waits at most for ``submarine job show`` to list a job's workers, or for ``flex`` to answer.
ANSWER_WITHIN_S = 10.0


@pytest.fixture()
def yarn() -> RecordingYarn:
    return RecordingYarn()


@pytest.fixture()
def driver(yarn: RecordingYarn) -> Iterator[tuple[JobDriver, int]]:
    """A job of up to 300 workers: its driver serves on port 0 and takes resizes."""
    job = JobDriver("big", Limits(AGENTS, 1, AGENTS), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = job.serve(0)
    assert served is not None
    server, port = served
    threading.Thread(target=job.resizer.loop, daemon=True, name="resizer").start()
    yield job, port
    for agent in job.registry.snapshot():
        agent.commands.put(None)
    server.stop(None)


async def agent(target: str, number: int, attached: asyncio.Event) -> list[str]:
    """One worker's agent: Hello, then Warm; answers Leave by exiting as a leaver. Returns the commands
    it was sent, once the driver ends its stream."""
    async with grpc.aio.insecure_channel(target, options=STREAM_KEEPALIVE_CLIENT_OPTIONS) as channel:
        call = pb_grpc.ElasticDriverStub(channel).Attach()
        instance = f"worker-{number}"
        await call.write(pb.AgentEvent(hello=pb.Hello(instance=instance, container_id=f"c{number}", host="h")))
        await call.write(pb.AgentEvent(warm=pb.Warm(pid=number, warmup_seconds=0.1)))
        attached.set()
        received = []
        async for command in call:
            kind = command.WhichOneof("command")
            received.append(kind)
            if kind == "leave":
                await call.write(pb.AgentEvent(exited=pb.Exited(exit_code=0, leaving=True, joined=True)))
                await call.done_writing()
        return received


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Waits for ``check`` to return True, at most ANSWER_WITHIN_S; fails naming ``what``."""
    retrying = AsyncRetrying(
        stop=stop_after_delay(ANSWER_WITHIN_S), wait=wait_fixed(0.1), retry=retry_if_result(lambda ok: not ok)
    )
    try:
        await retrying(check)
    except RetryError:
        pytest.fail(f"not within {ANSWER_WITHIN_S:.0f} s: {what}")


def test_300_attached_agents_leave_status_and_flex_answering(
    driver: tuple[JobDriver, int], yarn: RecordingYarn
) -> None:
    job, port = driver
    target = f"127.0.0.1:{port}"

    async def scenario() -> None:
        attached = [asyncio.Event() for _ in range(AGENTS)]
        agents = [asyncio.create_task(agent(target, i, attached[i])) for i in range(AGENTS)]
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ElasticDriverStub(channel)
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in attached)), ANSWER_WITHIN_S)
            seen: dict[str, int] = {}

            async def all_listed_warm() -> bool:
                status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
                seen.clear()
                seen.update({w.instance: w.state for w in status.workers})
                return len(seen) == AGENTS and set(seen.values()) == {pb.WORKER_WARM}

            await until(all_listed_warm, f"Status lists all {AGENTS} agents warm (it lists {len(seen)})")
            assert sorted(seen) == sorted(f"worker-{i}" for i in range(AGENTS))

            # Every stream is open: flex answers, and the scale-in reaches the one agent that goes.
            reply = await stub.SetTarget(pb.Target(workers=AGENTS - 1, reason="test"), timeout=ANSWER_WITHIN_S)
            assert (reply.previous, reply.target) == (AGENTS, AGENTS - 1)
            last = f"worker-{AGENTS - 1}"

            async def leaver_gone_and_yarn_told() -> bool:
                status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
                states = {w.instance: w.state for w in status.workers}
                return states[last] == pb.WORKER_EXITED and yarn.targets == [(AGENTS - 1, ())]

            await until(leaver_gone_and_yarn_told, f"{last} left and YARN was given {AGENTS - 1} workers")
            assert await agents[-1] == ["leave"]
            status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
            assert status.target == AGENTS - 1
            assert sum(w.state == pb.WORKER_WARM for w in status.workers) == AGENTS - 1
            assert yarn.reconciled >= 1
        for task in agents[:-1]:
            task.cancel()
        await asyncio.gather(*agents[:-1], return_exceptions=True)

    asyncio.run(scenario())


def test_a_call_above_the_bound_is_refused_at_once_not_queued(yarn: RecordingYarn) -> None:
    limits = Limits(1, 1, 1)
    job = JobDriver("small", limits, yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = job.serve(0)
    assert served is not None
    server, port = served
    bound = control_plane_threads(limits)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ElasticDriverStub(channel)
            hold = threading.Event()

            def quiet_agent(number: int) -> Iterator[pb.AgentEvent]:
                yield pb.AgentEvent(hello=pb.Hello(instance=f"worker-{number}", container_id=f"c{number}"))
                hold.wait()

            # Streams up to the bound: the job's agents, and old incarnations not yet seen go.
            streams = [stub.Attach(quiet_agent(i)) for i in range(bound)]
            assert job.registry.wait(lambda: len(job.registry.snapshot()) == bound, ANSWER_WITHIN_S)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            hold.set()  # the agents close their side: their streams end and free the driver's threads
            for stream in streams:
                assert list(stream) == []
            assert stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S).job == "small"
    finally:
        server.stop(None)
