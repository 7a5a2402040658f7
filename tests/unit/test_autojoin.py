"""A plain script's ``hvd.init()`` joins the job's ring: the agent's ``sitecustomize`` and
:mod:`tf_hooks.elastic.autojoin`, run in a real subprocess the way the agent starts training.

Horovod is replaced by a small package of the same module names (``horovod.common.basics`` with a
``HorovodBasics.init`` that records its calls), so these tests need neither TensorFlow nor Horovod;
the hook finds it on ``PYTHONPATH`` exactly as it finds the real one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from submarine_elastic.elastic.training import site_dir
from submarine_elastic.protocol.channel import FrameReader, encode
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tf_hooks.elastic import autojoin

FAKE_BASICS = '''
import json, os
class HorovodBasics:
    def init(self, comm=None):
        """Horovod's own init."""
        with open(os.environ["INIT_LOG"], "a") as f:
            f.write(json.dumps({k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}) + "\\n")
'''


@pytest.fixture()
def fake_horovod(tmp_path: Path) -> Path:
    root = tmp_path / "fake"
    (root / "horovod" / "common").mkdir(parents=True)
    (root / "horovod" / "__init__.py").write_text("")
    (root / "horovod" / "common" / "__init__.py").write_text("")
    (root / "horovod" / "common" / "basics.py").write_text(FAKE_BASICS)
    return root


def start_script(script: str, fake: Path, tmp_path: Path, agent_end: socket.socket | None) -> subprocess.Popen[str]:
    """Starts ``script`` as the agent starts a training command (its site directory first on PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir()), str(fake), str(Path(autojoin.__file__).parents[2])])
    env["INIT_LOG"] = str(tmp_path / "init.log")
    pass_fds: tuple[int, ...] = ()
    if agent_end is not None:
        env["SUBMARINE_AGENT_FD"] = str(agent_end.fileno())
        pass_fds = (agent_end.fileno(),)
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        pass_fds=pass_fds,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_message(sock: socket.socket) -> pb.FromTraining:
    sock.settimeout(30)
    reader = FrameReader(pb.FromTraining)
    while True:
        chunk = sock.recv(4096)
        assert chunk, "the training process closed the channel"
        messages = reader.feed(chunk)
        if messages:
            return messages[0]


def init_calls(tmp_path: Path) -> list[dict]:
    log = tmp_path / "init.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


SCRIPT = """
from horovod.common.basics import HorovodBasics
hvd = HorovodBasics()
hvd.init()
print("initialised", flush=True)
hvd.init()   # what Horovod's elastic reset does after every resize
print("re-initialised", flush=True)
"""


def test_the_first_hvd_init_waits_for_the_slot_and_joins_with_its_environment(
    fake_horovod: Path, tmp_path: Path
) -> None:
    ours, theirs = socket.socketpair()
    proc = start_script(SCRIPT, fake_horovod, tmp_path, theirs)
    theirs.close()
    warm = read_message(ours)
    assert warm.WhichOneof("message") == "ready" and warm.ready.pid == proc.pid
    assert init_calls(tmp_path) == []  # Horovod's own init has not run yet: the process waits for its slot
    ours.sendall(encode(pb.ToTraining(start=pb.Start(env={"HOROVOD_RANK": "2", "HOROVOD_SIZE": "3"}))))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["initialised", "re-initialised"]
    calls = init_calls(tmp_path)
    assert [c.get("HOROVOD_RANK") for c in calls] == ["2", "2"]  # joined with the slot's environment, twice
    ours.close()


def test_a_driver_lost_and_back_before_the_slot_comes_does_not_end_a_waiting_process(
    fake_horovod: Path, tmp_path: Path
) -> None:
    """A process waiting for its slot while the job's driver is killed and relaunched (a chaos run): its agent
    says driver_lost, then the next driver places it. It joins; it does not exit 1, which counted as a failed
    worker and failed the job."""
    ours, theirs = socket.socketpair()
    proc = start_script(SCRIPT, fake_horovod, tmp_path, theirs)
    theirs.close()
    assert read_message(ours).WhichOneof("message") == "ready"
    ours.sendall(encode(pb.ToTraining(driver_lost=True)))
    ours.sendall(encode(pb.ToTraining(driver_lost=False)))
    ours.sendall(encode(pb.ToTraining(start=pb.Start(env={"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}))))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["initialised", "re-initialised"]
    assert [c.get("HOROVOD_RANK") for c in init_calls(tmp_path)] == ["1", "1"]
    ours.close()


#: Its output's pipe once the agent that read it died: every write and flush fails (the buffered part of a real
#: one fails so as soon as it is flushed).
DEAD_PIPE = """
import io
class DeadPipe(io.TextIOBase):
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")
    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")
"""


@pytest.mark.parametrize("output", ["read", "broken"])
def test_a_process_whose_agent_dies_while_it_trains_leaves_the_job(
    fake_horovod: Path, tmp_path: Path, output: str
) -> None:
    """A chaos run killed a worker's agent (kill -9) in a ring of one: its training process, in a session of its
    own that YARN's kill of the container does not reach, trained on beside the ring the next driver formed from
    the checkpoint, both committing the same steps. A process that loses its agent now exits at once, also when
    saying why fails because its output went to the dead agent (``broken``): that failure once ended only the
    thread that reads the agent's channel, and the process trained on."""
    script = DEAD_PIPE + "import sys\nsys.stderr = DeadPipe()\n" if output == "broken" else ""
    script += "from horovod.common.basics import HorovodBasics\nHorovodBasics().init()\nimport time\ntime.sleep(60)\n"
    ours, theirs = socket.socketpair()
    proc = start_script(script, fake_horovod, tmp_path, theirs)
    theirs.close()
    assert read_message(ours).WhichOneof("message") == "ready"
    ours.sendall(encode(pb.ToTraining(start=pb.Start(env={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1"}))))
    assert read_message(ours).WhichOneof("message") == "beat"  # in the ring, training
    ours.close()  # the agent is gone
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 70, err
    if output == "read":
        assert "the worker agent went away while this process trained" in err


def test_a_leave_before_the_slot_is_refused_naming_it(fake_horovod: Path, tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    proc = start_script(SCRIPT, fake_horovod, tmp_path, theirs)
    theirs.close()
    assert read_message(ours).WhichOneof("message") == "ready"
    ours.sendall(encode(pb.ToTraining(leave=pb.Leave())))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "the worker agent sent leave before the slot's environment" in err
    assert init_calls(tmp_path) == []
    ours.close()


def test_outside_an_agent_hvd_init_is_horovods_own(fake_horovod: Path, tmp_path: Path) -> None:
    proc = start_script(SCRIPT, fake_horovod, tmp_path, None)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert len(init_calls(tmp_path)) == 2


class _Rendezvous(BaseHTTPRequestHandler):
    answer = b"-1,-1,-1,-1,-1,-1"
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).asked.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("answer", "code"), [(b"-1,-1,-1,-1,-1,-1", 0), (b"1,2,0,1,1,2", 1)])
def test_a_worker_asked_to_leave_exits_at_the_next_reset_without_horovods_init(
    fake_horovod: Path, tmp_path: Path, answer: bytes, code: int
) -> None:
    """No slot in the new ring: exit 0. Still a slot (the driver should prevent it): exit 1, never init twice."""
    _Rendezvous.answer, _Rendezvous.asked = answer, []
    server = HTTPServer(("127.0.0.1", 0), _Rendezvous)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ours, theirs = socket.socketpair()
    proc = start_script(SCRIPT, fake_horovod, tmp_path, theirs)
    theirs.close()
    assert read_message(ours).WhichOneof("message") == "ready"
    slot = {
        "HOROVOD_RANK": "1",
        "HOROVOD_HOSTNAME": "container_1-a7",
        "HOROVOD_LOCAL_RANK": "0",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_address[1]),
    }
    ours.sendall(encode(pb.ToTraining(start=pb.Start(env=slot))))
    ours.sendall(encode(pb.ToTraining(leave=pb.Leave())))  # the agent's Leave, before the reset
    out, err = proc.communicate(timeout=60)
    server.shutdown()
    assert proc.returncode == code, err
    assert out.splitlines() == ["initialised"]
    assert len(init_calls(tmp_path)) == 1  # the reset's init never reached Horovod
    assert _Rendezvous.asked == ["/rank_and_size/container_1-a7:0"]
    if code == 0:
        assert "left the ring (scale-in)" in err
    ours.close()


def test_a_sitecustomize_already_on_the_path_still_runs(fake_horovod: Path, tmp_path: Path) -> None:
    theirs_dir = tmp_path / "users-site"
    theirs_dir.mkdir()
    (theirs_dir / "sitecustomize.py").write_text("import builtins\nbuiltins.USERS_SITE_RAN = True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir()), str(theirs_dir), str(Path(autojoin.__file__).parents[2])])
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import builtins, sys; print(getattr(builtins, 'USERS_SITE_RAN', False), "
            "'tf_hooks.elastic.autojoin' in sys.modules)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.split() == ["True", "True"]


def test_build_optimizer_slots_uses_build_once_or_the_legacy_call() -> None:
    class Model:
        trainable_variables = ["w", "b"]

    class NewOptimizer:
        _built = False
        calls: list[object] = []

        def build(self, variables: object) -> None:
            self.calls.append(variables)
            self._built = True

    class LegacyOptimizer:
        def __init__(self) -> None:
            self.created: list[object] = []

        def _create_all_weights(self, variables: object) -> None:
            self.created.append(variables)

    new = NewOptimizer()
    autojoin.build_optimizer_slots(Model(), new)
    autojoin.build_optimizer_slots(Model(), new)
    assert new.calls == [["w", "b"]]
    legacy = LegacyOptimizer()
    autojoin.build_optimizer_slots(Model(), legacy)
    assert legacy.created == [["w", "b"]]
    autojoin.build_optimizer_slots(None, legacy)  # nothing to build for
    assert legacy.created == [["w", "b"]]


def test_the_previous_rings_connections_are_shut_down_so_a_waiting_peer_sees_the_end() -> None:
    """What the hook does at every re-init: connections the last init opened and Horovod left open are
    shut down (the peer's read ends at once); others, and ones already closed, are left alone."""
    server = socket.create_server(("127.0.0.1", 0))
    other = socket.create_connection(server.getsockname())  # opened before "init": not the ring's
    other_peer, _ = server.accept()
    before = autojoin.tcp_sockets()
    ring = [socket.create_connection(server.getsockname()) for _ in range(2)]  # opened "during init"
    autojoin._ring_sockets.update({fd: ino for fd, ino in autojoin.tcp_sockets().items() if before.get(fd) != ino})
    peers = [server.accept()[0] for _ in ring]  # the other end, as a peer process would hold it
    ring[1].close()  # Horovod did close this one
    peers[1].close()
    assert autojoin.release_previous_ring() == 1
    peers[0].settimeout(5)
    assert peers[0].recv(10) == b""  # end of file: the peer waiting on the old ring gives up now
    other_peer.settimeout(0.2)
    with pytest.raises(TimeoutError):
        other_peer.recv(10)  # still open
    assert autojoin._ring_sockets == {} and autojoin.release_previous_ring() == 0
    for s in (server, other, other_peer, ring[0], peers[0]):
        s.close()


def test_what_the_graveyard_is_given_is_freed_on_its_thread_while_the_caller_goes_on() -> None:
    """How a dropped tf.data iterator is freed: the caller (the training thread) does not wait for it."""
    graveyard = autojoin.Graveyard("test-graveyard")
    release = threading.Event()
    freed_on: list[str] = []

    class SlowToFree:  # stands for an iterator whose destructor waits for its pipeline's threads
        def __del__(self) -> None:
            release.wait(10)
            freed_on.append(threading.current_thread().name)

    graveyard.bury(SlowToFree())
    assert freed_on == [] and not graveyard.wait(0.2)  # the caller got back before it was freed
    release.set()
    assert graveyard.wait(10)
    assert freed_on == ["test-graveyard"]


def test_an_iterator_alive_until_the_interpreter_exits_is_freed_there_and_the_process_ends(tmp_path: Path) -> None:
    """A script that keeps its iterator in a module global to the end (Horovod's tape examples do) frees it while
    the interpreter is torn down, when no thread can start: the process ends instead of waiting for one."""
    script = tmp_path / "global_iterator.py"
    script.write_text(
        "import types\n"
        "from tf_hooks.elastic import autojoin\n"
        "class Resource:\n"
        "    def __del__(self):\n"
        "        print('freed', flush=True)\n"
        "class OwnedIterator:\n"
        "    def __init__(self):\n"
        "        self._iterator_resource = Resource()\n"
        "ops = types.ModuleType('iterator_ops')\n"
        "ops.OwnedIterator = OwnedIterator\n"
        "autojoin._patch_iterator(ops)\n"
        "data = OwnedIterator()\n"
        "print('trained', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(autojoin.__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trained", "freed"]
