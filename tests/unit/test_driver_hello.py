"""The job driver refuses an agent whose Hello it could not keep, before registering it: over real gRPC, a
worker named ``worker`` (no number) is answered INVALID_ARGUMENT, and Status and a resize still work after."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest
from tenacity import AsyncRetrying, RetryError, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.driver_servicer import hello_problems
from submarine_elastic.limits import MAX_AGENT_FIELD_LENGTH
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit.test_driver_scale import RecordingYarn

#: What a user waits at most for an answer of the driver.
ANSWER_WITHIN_S = 10.0


@pytest.fixture()
def yarn() -> RecordingYarn:
    return RecordingYarn()


@pytest.fixture()
def driver(yarn: RecordingYarn) -> Iterator[tuple[JobDriver, str]]:
    """A job of 2 workers (1 to 4): its driver serves on port 0 and takes resizes."""
    job = JobDriver("hello", Limits(2, 1, 4), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = job.serve(0)
    assert served is not None
    server, port = served
    threading.Thread(target=job.resizer.loop, daemon=True, name="resizer").start()
    yield job, f"127.0.0.1:{port}"
    for agent in job.registry.snapshot():
        agent.commands.put(None)
    server.stop(None)


async def good_agent(target: str, number: int, attached: asyncio.Event) -> list[str]:
    """A worker's agent: Hello, then Warm; answers Leave by exiting as a leaver. Returns its commands."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.ElasticDriverStub(channel).Attach()
        await call.write(pb.AgentEvent(hello=pb.Hello(instance=f"worker-{number}", container_id=f"c{number}")))
        await call.write(pb.AgentEvent(warm=pb.Warm(pid=number, warmup_seconds=0.1)))
        attached.set()
        received = []
        async for command in call:
            received.append(command.WhichOneof("command"))
            if received[-1] == "leave":
                await call.write(pb.AgentEvent(exited=pb.Exited(exit_code=0, leaving=True, joined=True)))
                await call.done_writing()
        return received


async def attach_refused(target: str, hello: pb.Hello) -> tuple[grpc.StatusCode, str]:
    """Attaches with ``hello`` and returns the status (code, details) the driver ends the stream with; fails if
    the driver takes it. Only the Hello is written: the driver answers it before anything else, and a second
    write racing the driver's refusal fails on the client's side (INTERNAL) instead of reading the answer."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.ElasticDriverStub(channel).Attach(timeout=ANSWER_WITHIN_S)
        commands = []
        await call.write(pb.AgentEvent(hello=hello))
        try:
            commands = [command async for command in call]
        except grpc.aio.AioRpcError:
            pass
        code = await call.code()
        if code == grpc.StatusCode.OK:
            pytest.fail(f"the driver took {hello.instance!r} and sent it {commands}")
        return code, await call.details() or ""


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    retrying = AsyncRetrying(
        stop=stop_after_delay(ANSWER_WITHIN_S), wait=wait_fixed(0.05), retry=retry_if_result(lambda ok: not ok)
    )
    try:
        await retrying(check)
    except RetryError:
        pytest.fail(f"not within {ANSWER_WITHIN_S:.0f} s: {what}")


@pytest.mark.parametrize(
    ("hello", "named"),
    [
        (pb.Hello(instance="worker", container_id="c9"), "worker instance 'worker' is not a YARN component instance"),
        (pb.Hello(instance="worker-", container_id="c9"), "worker instance 'worker-'"),
        (pb.Hello(instance="worker-1\n", container_id="c9"), "worker instance 'worker-1\\n'"),
        (pb.Hello(instance="", container_id="c9"), "worker instance ''"),
        (pb.Hello(instance="worker-9", container_id="c" * 300), "Hello.container_id is 300 characters, above 255"),
        (pb.Hello(instance="worker-9", container_id="c9", host="h" * 256), "Hello.host is 256 characters"),
        (pb.Hello(instance="worker-9", container_id="c9", agent_id="a" * 1000), "Hello.agent_id is 1000 characters"),
        (pb.Hello(instance="worker-9"), "Hello names neither an agent_id nor a container_id"),
    ],
    ids=["no-number", "empty-number", "newline", "empty", "long-container", "long-host", "long-agent-id", "no-id"],
)
def test_a_hello_the_driver_cannot_keep_is_refused_and_status_and_flex_still_work(
    driver: tuple[JobDriver, str], yarn: RecordingYarn, hello: pb.Hello, named: str
) -> None:
    job, target = driver

    async def scenario() -> None:
        attached = [asyncio.Event(), asyncio.Event()]
        agents = [asyncio.create_task(good_agent(target, i, attached[i])) for i in range(2)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in attached)), ANSWER_WITHIN_S)

        async def both_registered() -> bool:  # the agents wrote their Hello; the driver takes it in its own time
            return sorted(a.instance for a in job.registry.snapshot()) == ["worker-0", "worker-1"]

        await until(both_registered, "the driver registered worker-0 and worker-1")
        code, details = await attach_refused(target, hello)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert named in details
        assert sorted(a.instance for a in job.registry.snapshot()) == ["worker-0", "worker-1"]

        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ElasticDriverStub(channel)

            async def both_listed_warm() -> bool:
                status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
                states = [(w.instance, w.state) for w in status.workers]
                return states == [("worker-0", pb.WORKER_WARM), ("worker-1", pb.WORKER_WARM)]

            await until(both_listed_warm, "Status lists worker-0 and worker-1 warm, and no one else")

            # A scale-in orders the workers by their number: the resize thread takes it and tells YARN.
            reply = await stub.SetTarget(pb.Target(workers=1, reason="test"), timeout=ANSWER_WITHIN_S)
            assert (reply.previous, reply.target) == (2, 1)

            async def yarn_told() -> bool:
                return yarn.targets == [(1, ())]

            await until(yarn_told, "the resize to 1 worker reached YARN")
            assert await asyncio.wait_for(agents[1], ANSWER_WITHIN_S) == ["leave"]
            status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
            assert status.target == 1
            states = {w.instance: w.state for w in status.workers}
            assert states == {"worker-0": pb.WORKER_WARM, "worker-1": pb.WORKER_EXITED}
        agents[0].cancel()
        await asyncio.gather(agents[0], return_exceptions=True)

    asyncio.run(scenario())


def test_hello_problems_name_each_bad_field_and_a_good_hello_has_none() -> None:
    assert hello_problems(pb.Hello(instance="worker-0", container_id="c0")) == []
    long = "x" * (MAX_AGENT_FIELD_LENGTH + 1)
    problems = hello_problems(pb.Hello(instance="worker-1", host=long, node=long))
    assert problems == [
        f"Hello.host is {len(long)} characters, above {MAX_AGENT_FIELD_LENGTH}",
        f"Hello.node is {len(long)} characters, above {MAX_AGENT_FIELD_LENGTH}",
        "Hello names neither an agent_id nor a container_id",
    ]
    assert len(hello_problems(pb.Hello(instance="worker", agent_id="a"))) == 1  # a name without its number
