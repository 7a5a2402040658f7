"""The local channel between a worker agent and its training process.

The agent starts the training process with one end of a socket pair (``SUBMARINE_AGENT_FD``). Both ends
speak the messages of ``elastic.proto``: the process sends :class:`pb.FromTraining`, the agent
:class:`pb.ToTraining`, each framed as a 4-byte big-endian length and the serialized message. A frame
longer than :data:`MAX_FRAME_BYTES` or a message that does not parse is a broken channel
(:class:`ChannelError`), not something to skip: the two ends are one program's.

Nothing here imports more than protobuf's generated module: a training process pays little for it.
"""

from __future__ import annotations

import socket
import struct
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

#: The largest frame either end accepts (a Start carries a slot's environment: a few kB).
MAX_FRAME_BYTES = 1 << 20
_LENGTH = struct.Struct(">I")

M = TypeVar("M", bound=Message)


class ChannelError(Exception):
    """The other end sent a frame over :data:`MAX_FRAME_BYTES` or one that is not the expected message."""


def encode(message: Message) -> bytes:
    """``message`` as one frame."""
    body = message.SerializeToString()
    return _LENGTH.pack(len(body)) + body


def send(sock: socket.socket, message: Message) -> None:
    """Writes one frame; blocks until the kernel took it.

    Raises:
        OSError: the socket is closed or broken.
    """
    sock.sendall(encode(message))


class FrameReader(Generic[M]):
    """Splits the bytes read from a channel into messages of type ``kind``.

    Raises (from :meth:`feed`):
        ChannelError: a frame is too long or does not parse as ``kind``.
    """

    def __init__(self, kind: type[M]) -> None:
        self._kind = kind
        self._buf = b""

    def feed(self, data: bytes) -> list[M]:
        """The whole messages ``data`` completes, oldest first; a partial frame is kept for the next call."""
        self._buf += data
        out: list[M] = []
        while len(self._buf) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self._buf)
            if size > MAX_FRAME_BYTES:
                raise ChannelError(f"a frame of {size} bytes is over the channel's {MAX_FRAME_BYTES}")
            if len(self._buf) < _LENGTH.size + size:
                break
            body, self._buf = self._buf[_LENGTH.size : _LENGTH.size + size], self._buf[_LENGTH.size + size :]
            message = self._kind()
            try:
                message.ParseFromString(body)
            except DecodeError as exc:
                raise ChannelError(f"not a {self._kind.__name__} message: {exc}") from exc
            out.append(message)
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of a frame not complete yet."""
        return self._buf
