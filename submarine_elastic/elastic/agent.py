"""The worker agent: the main process of every ``worker`` container of an elastic job.

It starts the training command at once, so imports, model and data are built while the job's ring
keeps training (the script then blocks in :func:`tf_hooks.elastic.ring.init_horovod`), attaches to
the job's driver over gRPC, and relays: Hello, Warm when the script is ready to join, Exited when it
ends; Start (the slot's Horovod environment), Leave (scale-in) and Stop from the driver.

Exit status, which YARN's restart policy (ALWAYS) acts on:
- the training process failed (not on the driver's request): the agent exits with its code, YARN
  relaunches it (in the same container), and the new agent joins as a new Horovod host (its key is
  the container id plus the agent's pid, so it is not taken for the blacklisted one);
- the process finished, or left on scale-in: the agent stays until YARN stops the container, so
  YARN does not start a replacement nobody asked for.

Run by the job spec as ``python -m submarine_elastic.elastic.agent`` with the command, base64-encoded,
in ``SUBMARINE_WORKER_CMD_B64`` (so no quoting of the user's command can break YARN's launch script).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import grpc

from submarine_elastic import env
from submarine_elastic.elastic.api import ElasticError
from submarine_elastic.elastic.locate import driver_address
from submarine_elastic.elastic.proto import elastic_pb2 as pb
from submarine_elastic.elastic.proto import elastic_pb2_grpc as pb_grpc

log = logging.getLogger("submarine_elastic.agent")

CONNECT_TIMEOUT_S = 300.0
STOP_GRACE_S = 10.0


class Agent:
    def __init__(self, command: str, instance: str, container_id: str, host: str) -> None:
        self.command = command
        self.instance = instance
        self.container_id = container_id
        self.host = host
        # YARN relaunches a failed process in the same container: the pid tells the incarnations apart.
        self.agent_id = f"{container_id}-a{os.getpid()}"
        self.events: queue.Queue[pb.AgentEvent | None] = queue.Queue()
        self.leaving = False
        self.stopping = False
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel_end: socket.socket | None = None
        self.started_at = 0.0

    # -------------------------------------------------------------- the training process

    def start_training(self) -> None:
        ours, theirs = socket.socketpair()
        self.channel_end = ours
        child_env = dict(os.environ)
        child_env["SUBMARINE_AGENT_FD"] = str(theirs.fileno())
        child_env.pop("SUBMARINE_WORKER_CMD_B64", None)
        workdir = env.workdir()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", self.command],
            cwd=str(workdir) if workdir else None,
            env=child_env,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
        theirs.close()
        log.info("%s: started training process %d: %s", self.instance, self.proc.pid, self.command)
        threading.Thread(target=self._read_child, daemon=True, name="child-channel").start()

    def _read_child(self) -> None:
        assert self.channel_end is not None
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = self.channel_end.recv(4096)
            if not chunk:
                return
            buf += chunk
        try:
            message = json.loads(buf)
        except ValueError:
            log.error("%s: unreadable message from the training process: %r", self.instance, buf[:200])
            return
        if message.get("event") == "warm":
            warmup = time.monotonic() - self.started_at
            log.info("%s: training process warm after %.1f s", self.instance, warmup)
            self.events.put(pb.AgentEvent(warm=pb.Warm(pid=int(message.get("pid", 0)), warmup_seconds=warmup)))

    def send_slot_env(self, slot_env: dict[str, str]) -> None:
        if self.channel_end is None:
            return
        try:
            self.channel_end.sendall(json.dumps({"env": slot_env}).encode() + b"\n")
        except OSError as exc:
            log.warning("%s: could not hand the slot to the training process: %s", self.instance, exc)

    def stop_training(self, grace: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.stopping = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # -------------------------------------------------------------- the driver stream

    def _outgoing(self) -> Iterator[pb.AgentEvent]:
        hello = pb.Hello(instance=self.instance, container_id=self.container_id, host=self.host, agent_id=self.agent_id)
        yield pb.AgentEvent(hello=hello)
        while True:
            event = self.events.get()
            if event is None:
                return
            yield event

    def _handle(self, command: pb.AgentCommand) -> None:
        kind = command.WhichOneof("command")
        if kind == "start":
            log.info("%s: joining the ring as rank %s", self.instance, command.start.env.get("HOROVOD_RANK"))
            self.send_slot_env(dict(command.start.env))
        elif kind == "leave":
            log.info("%s: leaving the ring (scale-in)", self.instance)
            self.leaving = True
        elif kind == "stop":
            self.stop_training(command.stop.grace_seconds or STOP_GRACE_S)

    def run(self, target: str, token: str | None, tls_ca: bytes | None = None) -> int:
        self.start_training()
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if tls_ca is None:
            channel = grpc.insecure_channel(target)
        else:
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=tls_ca))
        try:
            grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            log.error("%s: the job driver at %s did not answer within %.0f s", self.instance, target, CONNECT_TIMEOUT_S)
            self.stop_training(STOP_GRACE_S)
            return 1
        stub = pb_grpc.ElasticDriverStub(channel)
        commands = stub.Attach(self._outgoing(), metadata=metadata)
        reader = threading.Thread(target=self._read_commands, args=(commands,), daemon=True, name="driver-stream")
        reader.start()

        assert self.proc is not None
        code = self.proc.wait()
        leaving = self.leaving or self.stopping
        log.info("%s: training process exited with %d%s", self.instance, code, " (leaving)" if leaving else "")
        self.events.put(pb.AgentEvent(exited=pb.Exited(exit_code=code, leaving=leaving)))
        if code != 0 and not leaving:
            time.sleep(0.5)  # let the Exited event reach the driver before the container goes
            self.events.put(None)
            return code
        # Finished or removed: stay until YARN stops this container (exiting would start a new one).
        reader.join()
        while True:
            time.sleep(3600)

    def _read_commands(self, commands: Iterator[pb.AgentCommand]) -> None:
        try:
            for command in commands:
                self._handle(command)
        except grpc.RpcError as exc:
            if self.proc is not None and self.proc.poll() is None:
                log.error("%s: lost the job driver (%s); stopping the training process", self.instance, exc.code())
                self.stop_training(STOP_GRACE_S)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    encoded = os.environ.get("SUBMARINE_WORKER_CMD_B64")
    if not encoded:
        log.error("SUBMARINE_WORKER_CMD_B64 is not set: nothing to run")
        return 2
    command = base64.b64decode(encoded).decode()
    instance = os.environ.get("SUBMARINE_WORKER_INSTANCE") or socket.gethostname()
    container_id = os.environ.get("CONTAINER_ID") or f"{instance}-{os.getpid()}"
    host = os.environ.get("NM_HOST") or socket.gethostname()
    try:
        token, tls_ca = env.job_token(), env.driver_tls_ca()
        target = driver_address()
    except (ElasticError, OSError) as exc:
        log.error("%s", exc)
        return 2
    agent = Agent(command, instance, container_id, host)

    def on_sigterm(_signum: int, _frame: object) -> None:
        agent.stop_training(STOP_GRACE_S)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    return agent.run(target, token, tls_ca)


if __name__ == "__main__":
    sys.exit(main())
