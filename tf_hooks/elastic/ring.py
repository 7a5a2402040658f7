"""Joining the Horovod ring when started by a submarine-elastic worker agent.

The agent in each worker container starts the training command as soon as the container runs, with
``SUBMARINE_AGENT_FD`` naming one end of a socket pair. The script imports TensorFlow, builds its model
and data, and then calls :func:`init_horovod`, which tells the agent the process is warm and blocks
until the job's driver places it in a ring (the agent passes on the slot's Horovod environment). So a
joiner's start-up runs while the current ring keeps training; only the re-form is on its critical path.

Outside an agent (``horovodrun``, a plain ``python``) :func:`init_horovod` is just ``hvd.init()``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from submarine_elastic import env


class RingJoinError(RuntimeError):
    """The agent's channel closed or sent something unreadable before the ring formed."""


def wait_for_slot(timeout: float | None = None) -> dict[str, str]:
    """Tell the agent this process is warm and block until it sends the slot's Horovod environment.

    Blocks for up to ``timeout`` seconds (None: until the driver places the process). Sets the
    environment in ``os.environ`` and returns it; returns ``{}`` when not started by an agent.

    Raises:
        RingJoinError: the agent went away or sent a malformed message.
        TimeoutError: ``timeout`` passed first.
    """
    fd = env.agent_fd()
    if fd is None:
        return {}
    sock = socket.socket(fileno=fd)
    try:
        sock.settimeout(timeout)
        sock.sendall(json.dumps({"event": "warm", "pid": os.getpid(), "time": time.time()}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            try:
                chunk = sock.recv(65536)
            except TimeoutError as exc:
                raise TimeoutError(f"not placed in a ring within {timeout} s") from exc
            if not chunk:
                raise RingJoinError("the worker agent closed the channel before the ring formed")
            buf += chunk
        try:
            message = json.loads(buf)
            slot_env = {str(k): str(v) for k, v in message["env"].items()}
        except (ValueError, KeyError, AttributeError) as exc:
            raise RingJoinError(f"unreadable message from the worker agent: {buf[:200]!r}") from exc
    finally:
        sock.close()
    os.environ.pop("SUBMARINE_AGENT_FD", None)
    os.environ.update(slot_env)
    return slot_env


def init_horovod(timeout: float | None = None) -> Any:
    """:func:`wait_for_slot`, then ``horovod.tensorflow.init()``; returns the ``horovod.tensorflow`` module.

    Raises:
        RingJoinError, TimeoutError: as :func:`wait_for_slot`.
    """
    wait_for_slot(timeout)
    import horovod.tensorflow as hvd

    hvd.init()
    return hvd
