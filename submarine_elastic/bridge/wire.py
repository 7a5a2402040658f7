"""The bridge's side of py4j's wire protocol: who may connect, for how long, and what a connection may ask.

py4j's own Python server accepts any number of connections with a thread each, waits for their login
without a timeout, logs a traceback for every wrong token, and answers a call command with
``getattr(object, name)(*args)`` for any name: attributes could be set, dunders read (a returned object
that looks like a proxy is registered as a new one), and a failure went back as a Python traceback. The
bridge serves its port with the classes below instead; py4j still builds the returned Java values.

What a connection may do:

- Log in within :data:`~submarine_elastic.bridge.api.LOGIN_TIMEOUT_S` (the TLS handshake included): the
  token is compared in constant time; a wrong one closes the connection. At most
  :data:`~submarine_elastic.bridge.api.MAX_PENDING_CONNECTIONS` wait for their login and
  :data:`~submarine_elastic.bridge.api.MAX_CONNECTIONS` are logged in at once; the next one is closed at
  once. Each refusal is counted, and logged at most once per
  :data:`~submarine_elastic.bridge.api.REFUSAL_LOG_INTERVAL_S` with the count.
- Then call the methods of ``ElasticScheduler`` on the entry point (``c``) and release proxies (``g``,
  a no-op: the bridge hands out no Python object). Arguments must be ``String``/``null``, ``int``,
  ``long``, ``double`` or ``boolean``; anything else, another object, or a member outside the interface
  is answered with an ``ElasticSchedulerException`` whose message names it. Any other command, a line
  over :data:`~submarine_elastic.bridge.api.MAX_LINE_BYTES` or more than
  :data:`~submarine_elastic.bridge.api.MAX_ARGUMENTS` arguments closes the connection, and so does
  silence longer than :data:`~submarine_elastic.bridge.api.IDLE_TIMEOUT_S`.
"""

from __future__ import annotations

import hmac
import logging
import select
import ssl
import threading
import time
from collections.abc import Callable
from socket import socket as Socket
from typing import Any, BinaryIO

from py4j import protocol as proto
from py4j.clientserver import ClientServer, ClientServerConnection, JavaClient, PythonServer
from py4j.java_gateway import quiet_close, quiet_shutdown, server_started, set_linger
from py4j.protocol import Py4JJavaError, Py4JNetworkError

from submarine_elastic.bridge.api import (
    JAVA_INTERFACE,
    MAX_ARGUMENTS,
    MAX_LINE_BYTES,
    BridgeLimits,
)
from submarine_elastic.bridge.service import INTERFACE, ElasticSchedulerService, shown

_log = logging.getLogger(__name__)

#: The argument types a JVM proxy sends for the interface's parameters: null, String, int, long, double,
#: boolean. py4j decodes these to Python values without touching the JVM.
_ARGUMENT_TYPES = frozenset(
    {
        proto.NULL_TYPE,
        proto.STRING_TYPE,
        proto.INTEGER_TYPE,
        proto.LONG_TYPE,
        proto.DOUBLE_TYPE,
        proto.BOOLEAN_TYPE,
    }
)
#: Seconds between two looks of the accept thread at whether the bridge stopped.
_ACCEPT_POLL_S = 1.0
#: Seconds the accept thread waits after accepting failed (out of file descriptors) before it tries again.
_ACCEPT_RETRY_S = 0.1
#: The listening socket's backlog.
_LISTEN_BACKLOG = 256
#: What a caller gets when the bridge cannot even build a typed exception (a plain py4j error).
_INTERNAL = "internal error in the bridge; its log has the details"


class ProtocolViolation(Exception):
    """A connection sent something no py4j client sends (the message says what); it is closed."""


class RefusalLog:
    """Counts refusals of one kind and logs at most one line per ``interval_s`` with the count since the
    last line (the first refusal is logged at once). Never logs what a peer sent beyond
    :data:`~submarine_elastic.bridge.service.SHOWN_NAME_CHARS` characters of it.
    """

    def __init__(
        self,
        what: str,
        interval_s: float,
        *,
        logger: logging.Logger = _log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._interval = interval_s
        self._logger = logger
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0
        self._last: float | None = None
        self._detail = ""

    def refused(self, detail: str = "") -> None:
        """Count one refusal; log a line if none was logged in the last ``interval_s``."""
        with self._lock:
            self._count += 1
            self._detail = detail
            now = self._clock()
            if self._last is not None and now - self._last < self._interval:
                return
            self._emit(now)

    def flush(self) -> None:
        """Log the refusals counted since the last line, if any (when the bridge stops)."""
        with self._lock:
            if self._count:
                self._emit(self._clock())

    def _emit(self, now: float) -> None:
        since = "" if self._last is None else f" in the last {now - self._last:.0f} s"
        detail = f" (last: {self._detail})" if self._detail else ""
        self._logger.warning(
            "py4j bridge refused %d %s%s%s; at most one such line every %.0f s",
            self._count,
            self._what,
            since,
            detail,
            self._interval,
        )
        self._count = 0
        self._last = now


class Guard:
    """What every connection of one bridge shares: its token, its bounds and the counts against them,
    its refusal logs, and the service calls go to.
    """

    def __init__(
        self,
        service: ElasticSchedulerService,
        token: str,
        limits: BridgeLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.limits = limits
        self._token = token.encode("ascii")
        self._clock = clock
        self._lock = threading.Lock()
        self._deadlines: dict[Socket, float] = {}  # of the connections waiting for their login
        self.logged_in = 0
        interval = limits.refusal_log_interval_s
        self.wrong_login = RefusalLog("logins with a wrong or no token", interval)
        self.over_bound = RefusalLog("connections over its bounds", interval)
        self.outside = RefusalLog("calls outside the interface", interval)
        self.broken = RefusalLog("connections that broke the protocol or timed out", interval)

    def token_matches(self, offered: bytes) -> bool:
        """Constant-time comparison of ``offered`` with the token."""
        return hmac.compare_digest(offered, self._token)

    @property
    def pending(self) -> int:
        """Connections waiting for their login."""
        with self._lock:
            return len(self._deadlines)

    def admit(self, sock: Socket) -> bool:
        """Take a slot for ``sock``, which has the login timeout from now to log in; False when all
        slots are taken."""
        with self._lock:
            if len(self._deadlines) >= self.limits.max_pending:
                return False
            self._deadlines[sock] = self._clock() + self.limits.login_timeout_s
            return True

    def promote(self, sock: Socket) -> bool:
        """Move ``sock``, which logged in, from its pending slot to a logged-in one; False (keeping the
        pending slot) when all logged-in slots are taken."""
        with self._lock:
            if self.logged_in >= self.limits.max_connections:
                return False
            self._deadlines.pop(sock, None)
            self.logged_in += 1
            return True

    def release(self, sock: Socket, logged_in: bool) -> None:
        with self._lock:
            if logged_in:
                self.logged_in -= 1
            else:
                self._deadlines.pop(sock, None)

    def expire(self) -> float:
        """Shut down the connections past their login deadline (a peer sending a byte now and then
        still gets no more than the login timeout in all); the seconds until the next deadline."""
        now = self._clock()
        with self._lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
            upcoming = [deadline - now for deadline in self._deadlines.values() if deadline > now]
        for sock in late:
            quiet_shutdown(sock)  # wakes the connection's thread, which closes it and gives its slot back
        return min(upcoming, default=_ACCEPT_POLL_S)

    def flush(self) -> None:
        for log in (self.wrong_login, self.over_bound, self.outside, self.broken):
            log.flush()


class BoundedLines:
    """A connection's input read line by line, no line longer than
    :data:`~submarine_elastic.bridge.api.MAX_LINE_BYTES` (py4j reads whole lines, however long)."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw

    def readline(self, size: int = -1) -> bytes:
        """The next line with its newline; ``b""`` at the end of the stream.

        Raises:
            ProtocolViolation: the line is longer than the bound.
        """
        line = self._raw.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES or (len(line) == MAX_LINE_BYTES and not line.endswith(b"\n")):
            raise ProtocolViolation(f"a protocol line longer than {MAX_LINE_BYTES} bytes")
        return line

    def close(self) -> None:
        self._raw.close()


def _text(line: bytes) -> str:
    """A protocol line without its newline. Raises ``UnicodeDecodeError`` on bytes that are not UTF-8."""
    return line.decode("utf-8")[:-1] if line.endswith(b"\n") else line.decode("utf-8")


def encode_error(error: BaseException) -> str:
    """The reply that makes the calling JVM thread throw ``error``: the Java exception it carries when
    the Java side built one (``Py4JJavaError``), else a plain py4j error with its message."""
    java_exception = getattr(error, "java_exception", None) if isinstance(error, Py4JJavaError) else None
    object_id = getattr(java_exception, "_get_object_id", None)
    if callable(object_id):
        return f"{proto.RETURN_MESSAGE}{proto.ERROR}{proto.REFERENCE_TYPE}{object_id()}\n"
    return f"{proto.RETURN_MESSAGE}{proto.ERROR}{proto.STRING_TYPE}{proto.escape_new_line(str(error))}\n"


def answer_call(service: ElasticSchedulerService, object_id: str, method: str, raw_args: list[str]) -> str:
    """The reply to one call command: ``object_id`` must be the entry point, each of ``raw_args`` (py4j's
    encoding, one per line) one of the argument types the interface takes, and ``method`` one of its
    methods (:meth:`ElasticSchedulerService.dispatch`). Every refusal and every failure is a typed
    exception for the caller; no traceback leaves this process.
    """
    refuse: str | None = None
    if object_id != proto.ENTRY_POINT_OBJECT_ID:
        refuse = f"no object {shown(object_id)} here: the bridge serves only its {JAVA_INTERFACE}"
    else:
        for index, raw in enumerate(raw_args, 1):
            if raw[:1] not in _ARGUMENT_TYPES:
                refuse = f"argument {index} of {shown(method)} is of a type the interface does not take"
                break
    try:
        if refuse is not None:
            return encode_error(service.java.error("ElasticSchedulerException", refuse))
        args = [proto.get_return_value(proto.SUCCESS + raw, None) for raw in raw_args]
        value = service.dispatch(method, args)
    except Py4JJavaError as error:
        return encode_error(error)  # the typed exception the Java side built for the caller
    except Exception as error:  # noqa: BLE001 - every outcome of a call is a reply, never a dead connection
        # A malformed number, or the JVM not answering while the Java exception was built.
        _log.warning("py4j bridge: a call to %s failed: %s: %s", shown(method), type(error).__name__, error)
        return encode_error(Exception(_INTERNAL))
    if value is None:
        return f"{proto.RETURN_MESSAGE}{proto.SUCCESS}{proto.NULL_TYPE}\n"
    reference = getattr(value, "_get_object_id", None)
    if not callable(reference):  # only Java objects go back: the bridge hands out no Python object
        _log.error("py4j bridge: %s returned a %s, not a Java object", method, type(value).__name__)
        return encode_error(Exception(_INTERNAL))
    return f"{proto.RETURN_MESSAGE}{proto.SUCCESS}{proto.REFERENCE_TYPE}{reference()}\n"


class GuardedConnection(ClientServerConnection):
    """One connection a JVM opened to the bridge's port: its calls go through :func:`answer_call`, the
    bridge's own calls into the JVM while serving one (building the values it returns) go over it too,
    and its lines are bounded.
    """

    guard: Guard | None = None
    socket: Any
    stream: Any

    def serve(self, guard: Guard, sock: Socket, context: ssl.SSLContext | None) -> None:
        """Run on a thread of its own: TLS handshake and login within the login timeout, then calls
        until the JVM closes the connection, breaks the protocol or stays silent past the idle
        timeout. Gives its slot back when it ends.
        """
        self.guard = guard
        limits = guard.limits
        logged_in = False
        reset = True
        raw = sock
        try:
            sock.settimeout(limits.login_timeout_s)
            if context is not None:
                sock = context.wrap_socket(sock, server_side=True)
            self.socket = sock
            self.stream = BoundedLines(sock.makefile("rb"))
            self.is_connected = True
            if not self._login(sock, limits.login_timeout_s):
                guard.wrong_login.refused()
                reset = False  # the JVM reads the refusal before the end of the stream
                return
            if not guard.promote(raw):
                guard.over_bound.refused(f"{limits.max_connections} logged-in connections")
                return
            logged_in = True
            sock.settimeout(limits.idle_timeout_s)
            self.java_client.set_thread_connection(self)
            self._serve_calls(sock)
            reset = False
        except (OSError, ValueError, ProtocolViolation, Py4JNetworkError) as error:
            # ssl.SSLError and socket.timeout are OSErrors; UnicodeDecodeError is a ValueError.
            guard.broken.refused(f"{type(error).__name__}: {str(error)[:80]}")
        except Exception as error:  # noqa: BLE001 - a peer must not get a traceback per connection into the log
            guard.broken.refused(f"unexpected {type(error).__name__}: {str(error)[:80]}")
        finally:
            # The slot is given back before the socket closes: a peer that sees its connection closed finds
            # the bridge's counts without it.
            guard.release(raw, logged_in)
            if self.socket is None:  # the handshake failed: only the raw socket is open
                quiet_close(raw)
            self.close(reset=reset)

    def _login(self, sock: Socket, timeout_s: float) -> bool:
        command = _text(self.stream.readline())
        if command == "":
            raise ProtocolViolation(f"no login within {timeout_s:g} s, or the connection closed before it")
        if command != proto.AUTH_COMMAND_NAME:
            return False
        token = self.stream.readline()
        if _text(self.stream.readline()) != proto.END:
            return False
        if not self.guard or not self.guard.token_matches(token[:-1] if token.endswith(b"\n") else token):
            sock.sendall(proto.ERROR_RETURN_MESSAGE.encode("utf-8"))
            return False
        sock.sendall(proto.OUTPUT_VOID_COMMAND.encode("utf-8"))
        return True

    def _serve_calls(self, sock: Socket) -> None:
        while True:
            command = _text(self.stream.readline())
            if command == "":
                return  # the JVM closed the connection
            sock.sendall(self._answer(command).encode("utf-8"))

    def _answer(self, command: str) -> str:
        """The reply to one command from the JVM: a call (``c``) or the release of a proxy (``g``, a
        no-op: the bridge hands out none).

        Raises:
            ProtocolViolation: any other command, or a release not closed by its end line.
        """
        if command not in (proto.CALL_PROXY_COMMAND_NAME, proto.GARBAGE_COLLECT_PROXY_COMMAND_NAME):
            raise ProtocolViolation(f"unknown command {shown(command)}")
        object_id = _text(self.stream.readline())
        if command == proto.CALL_PROXY_COMMAND_NAME:
            return self._call_proxy(object_id, self.stream)
        if _text(self.stream.readline()) != proto.END:
            raise ProtocolViolation("a command not closed by its end line")
        return proto.SUCCESS_RETURN_MESSAGE

    def send_command(self, command: str) -> str:
        """Send one of the bridge's own commands to the JVM (building or releasing a value while serving a
        call) and return its answer; calls the JVM makes meanwhile are served as above, and anything else
        ends the connection. Unlike py4j's, logs nothing.

        Raises:
            Py4JNetworkError: the connection broke, timed out or carried something no JVM sends.
        """
        sock = self.socket
        try:
            if sock is None:
                raise ProtocolViolation("the connection is closed")
            sock.sendall(command.encode("utf-8"))
            while True:
                line = _text(self.stream.readline())
                if line.startswith(proto.RETURN_MESSAGE):
                    return line[1:]
                if line == "":
                    raise ProtocolViolation("the JVM closed the connection")
                sock.sendall(self._answer(line).encode("utf-8"))
        except (OSError, ValueError, ProtocolViolation) as error:
            self.close(reset=True)  # whatever catches the error, this connection is done
            raise Py4JNetworkError(f"the JVM connection failed: {error}", error, proto.ERROR_ON_RECEIVE) from error

    def _call_proxy(self, obj_id: str, input: Any) -> str:
        """A call command's reply (also when the JVM calls while the bridge waits for it)."""
        method = _text(self.stream.readline())
        raw_args: list[str] = []
        while True:
            line = _text(self.stream.readline())
            if line == proto.END:
                break
            if line == "" or len(raw_args) == MAX_ARGUMENTS:
                raise ProtocolViolation(f"a call of more than {MAX_ARGUMENTS} arguments or cut short")
            raw_args.append(line)
        guard = self.guard
        if guard is None:
            raise ProtocolViolation("a call on a connection of no bridge")
        if method not in INTERFACE or obj_id != proto.ENTRY_POINT_OBJECT_ID:
            guard.outside.refused(f"{shown(obj_id)}.{shown(method)}")
        return answer_call(guard.service, obj_id, method, raw_args)

    def close(self, reset: bool = False) -> None:
        """Close the socket (with a reset when ``reset``); py4j's own logs a line for every connection. The
        stream stays, closed: a thread reading it gets an error instead of ``None``."""
        sock, stream = self.socket, self.stream
        self.socket = None
        if sock is None:
            return
        if reset:
            try:
                set_linger(sock)
            except OSError:
                pass
        else:
            quiet_shutdown(sock)
        quiet_close(stream)
        quiet_close(sock)


class GuardedJavaClient(JavaClient):
    """py4j's client to the JVM, limited to the connection of the call being served: the bridge never
    opens one to the JVM's port (whose server py4j cannot put on TLS, and whose listener it cannot
    check), so its token never goes there."""

    def _create_new_connection(self) -> ClientServerConnection:
        raise Py4JNetworkError(
            "the bridge calls the JVM only over the connection of a call it is serving, never on a thread of its own"
        )


class GuardedPythonServer(PythonServer):
    """Accepts JVM connections within the guard's bounds and serves each on a thread of its own (at
    most ``max_pending + max_connections`` such threads)."""

    guard: Guard

    def run(self) -> None:
        with self.lock:
            self.is_shutdown = False
        server_socket = self.server_socket
        server_socket.listen(_LISTEN_BACKLOG)
        server_socket.setblocking(False)
        server_started.send(self, server=self)
        while not self.is_shutdown:
            try:
                readable, _, _ = select.select([server_socket], [], [], min(_ACCEPT_POLL_S, self.guard.expire()))
                if self.is_shutdown:
                    break
                while readable:  # every connection waiting, so a burst does not fill the backlog
                    try:
                        sock, _ = server_socket.accept()
                    except BlockingIOError:
                        break
                    sock.setblocking(True)
                    self._admit(sock)
            except (OSError, ValueError) as error:
                if self.is_shutdown:
                    break
                # Out of file descriptors, say: keep listening, a moment later.
                self.guard.broken.refused(f"accepting failed: {type(error).__name__}: {str(error)[:80]}")
                time.sleep(_ACCEPT_RETRY_S)

    def _admit(self, sock: Socket) -> None:
        guard = self.guard
        if not guard.admit(sock):
            guard.over_bound.refused(f"{guard.limits.max_pending} connections waiting to log in")
            try:
                set_linger(sock)
            except OSError:
                pass
            quiet_close(sock)
            return
        connection = GuardedConnection(
            self.java_parameters, self.python_parameters, self.gateway_property, self.gateway_client, python_server=self
        )
        thread = threading.Thread(
            target=connection.serve,
            args=(guard, sock, self.ssl_context),
            name="py4j-bridge-connection",
            daemon=True,
        )
        with self.lock:
            if self.is_shutdown:
                guard.release(sock, False)
                quiet_close(sock)
                return
            self.connections.add(connection)
            try:
                thread.start()
            except RuntimeError as error:  # no thread to be had: this connection only is refused
                guard.release(sock, False)
                guard.broken.refused(f"no thread for a connection: {error}")
                quiet_close(sock)


class GuardedClientServer(ClientServer):
    """A ``ClientServer`` whose Python port and client are the guarded ones above, and
    whose ``shutdown`` leaves the JVM alone (py4j's own would send the JVM a shutdown command, ending the
    caller's ``ClientServer``; py4j also calls it when the Python port cannot be bound).
    """

    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(**kwargs)

    def _create_gateway_client(self) -> GuardedJavaClient:
        return GuardedJavaClient(
            self.java_parameters, self.python_parameters, finalizer_deque=self._create_finalizer_worker()
        )

    def _create_callback_server(self, callback_server_parameters: Any) -> GuardedPythonServer:
        server = GuardedPythonServer(
            self._gateway_client, self.java_parameters, self.python_parameters, self.gateway_property
        )
        server.guard = self.guard
        return server

    def shutdown(self, raise_exception: bool = False) -> None:
        self.shutdown_callback_server(raise_exception=raise_exception)
