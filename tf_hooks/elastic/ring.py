"""Joining the Horovod ring when started by a submarine-elastic worker agent.

The agent in each worker container starts the training command as soon as the container runs, with
``SUBMARINE_AGENT_FD`` naming one end of a socket pair. The script imports TensorFlow, builds its model
and data, and then calls :func:`init_horovod`, which tells the agent the process is warm and blocks
until the job's driver places it in a ring (the agent passes on the slot's Horovod environment). So a
joiner's start-up runs while the current ring keeps training; only the re-form is on its critical path.

Outside an agent (``horovodrun``, a plain ``python``) :func:`init_horovod` is just ``hvd.init()``.

The channel stays open once the process is in a ring: on scale-in the agent writes ``{"leave": true}``
into it, and :func:`leave_requested` (asked by :mod:`tf_hooks.elastic.autojoin` when Horovod re-forms
the ring) tells the process to exit cleanly instead of being thrown out of the ring by Horovod.
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


#: The agent's end of the channel once this process is in a ring (None: not started by an agent).
_channel: socket.socket | None = None
#: What the agent sent after the slot's line, not read as a message yet.
_pending = b""
_leave_seen = False


def wait_for_slot(timeout: float | None = None) -> dict[str, str]:
    """Tell the agent this process is warm and block until it sends the slot's Horovod environment.

    Blocks for up to ``timeout`` seconds (None: until the driver places the process). Sets the
    environment in ``os.environ`` and returns it; returns ``{}`` when not started by an agent.

    Raises:
        RingJoinError: the agent went away or sent a malformed message.
        TimeoutError: ``timeout`` passed first.
    """
    global _channel, _pending
    fd = env.agent_fd()
    if fd is None:
        return {}
    sock = socket.socket(fileno=fd)
    placed = False
    try:
        sock.settimeout(timeout)
        sock.sendall(json.dumps({"event": "warm", "pid": os.getpid(), "time": time.time()}).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            try:
                chunk = sock.recv(65536)
            except TimeoutError as exc:
                raise TimeoutError(f"not placed in a ring within {timeout} s") from exc
            if not chunk:
                raise RingJoinError("the worker agent closed the channel before the ring formed")
            buf += chunk
        line, _, _pending = buf.partition(b"\n")
        try:
            message = json.loads(line)
            slot_env = {str(k): str(v) for k, v in message["env"].items()}
        except (ValueError, KeyError, AttributeError) as exc:
            raise RingJoinError(f"unreadable message from the worker agent: {line[:200]!r}") from exc
        placed = True
    finally:
        if not placed:
            sock.close()
    _channel = sock
    os.environ.pop("SUBMARINE_AGENT_FD", None)
    os.environ.update(slot_env)
    return slot_env


def leave_requested() -> bool:
    """Whether the agent has asked this process to leave the ring (scale-in). Never blocks.

    Answers False outside an agent, before the process is in a ring, and when the agent is gone.
    """
    global _leave_seen, _pending
    if _leave_seen or _channel is None:
        return _leave_seen
    data, _pending = _pending, b""
    try:
        _channel.setblocking(False)
        data += _channel.recv(65536)
    except (BlockingIOError, InterruptedError, OSError):
        pass
    finally:
        try:
            _channel.setblocking(True)
        except OSError:
            pass
    for line in data.splitlines():
        try:
            if json.loads(line).get("leave"):
                _leave_seen = True
        except (ValueError, AttributeError):
            continue
    return _leave_seen


def init_horovod(timeout: float | None = None) -> Any:
    """:func:`wait_for_slot`, then ``horovod.tensorflow.init()``; returns the ``horovod.tensorflow`` module.

    Raises:
        RingJoinError, TimeoutError: as :func:`wait_for_slot`.
    """
    wait_for_slot(timeout)
    import horovod.tensorflow as hvd

    hvd.init()
    return hvd
