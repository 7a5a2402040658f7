"""Make a plain Horovod script join its job's ring: ``hvd.init()`` as written, no project call needed.

The worker agent starts the training command with ``tf_hooks/elastic/_site`` first on ``PYTHONPATH``;
the ``sitecustomize`` there calls :func:`install` before the user's code runs. From then on, in that
process and any Python process it starts:

- the first ``hvd.init()`` (of any Horovod binding: ``horovod.tensorflow``, ``horovod.tensorflow.keras``,
  ...) first does :func:`tf_hooks.elastic.ring.wait_for_slot`: it tells the agent the process is warm
  and blocks until the job's driver places it in a ring, then initialises Horovod in it. So a script
  written for ``horovodrun`` never trains alone at world size 1.
- a later ``hvd.init()`` (Horovod's elastic reset re-initialises after every resize) first takes the
  environment of the ring a new driver incarnation formed, when the job's driver was lost and came back
  (:func:`tf_hooks.elastic.ring.prepare_reinit`); and, when the agent has
  asked the process to leave (scale-in), asks the job's rendezvous for this process's slot in the new
  ring, as Horovod's own ``init`` would; the driver sends Leave before it withdraws the worker, so the
  answer is "no slot", and the process exits with status 0 instead of being aborted by Horovod
  (``SIGABRT``, "has been removed from elastic job").
- importing Horovod's Keras binding under Keras 2 (``TF_USE_LEGACY_KERAS=1``) points its backend at
  ``tf.keras.backend``: Horovod binds the ``keras`` package's (Keras 3) backend, with which its
  ``MetricAverageCallback`` and ``broadcast``/``allgather`` helpers fail at the first epoch end.
- every ``hvd.init()`` after the first first shuts down the TCP connections the previous one opened
  (Horovod's Gloo ring): Horovod leaves them open after its elastic reset, so a surviving peer still
  waiting in the old ring on this process (it lost another peer) got no end-of-file and waited out the
  Gloo timeout (20 s) before it re-formed too.
- a ``tf.data`` iterator (what Keras ``fit`` iterates) that is dropped is freed on a thread of its own,
  not where it was dropped: freeing it waits for its pipeline's threads, among them the autotuning thread,
  which wakes up only at the end of its optimisation period (it doubles, up to 60 s, as the iterator ages).
  Dropped on the training thread, that wait (measured 0.5-19 s, in about one ``fit`` in six) held up the
  ring's re-form wherever a ``fit`` ended: the ``fit`` a resize interrupted, in a leaver before it asked
  the rendezvous for its slot and in a survivor before it re-joined; and the one-step ``fit`` that Horovod's
  Keras examples run after each reset, which ends only once a joiner has built its model.
- ``hvd.elastic.TensorFlowKerasState`` (and ``KerasState``) builds the optimizer's slots before it
  synchronises: a joiner's optimizer has none until its first step, so Horovod's broadcast of rank 0's
  slots would wait forever for the joiner (the ring hangs at the first scale-out).
- importing Horovod's Keras binding under Keras 3 replaces the helpers that cannot work there
  (``DistributedOptimizer`` does not allreduce in ``fit``; ``elastic.KerasState`` and the broadcast and
  metric-average callbacks fail) by functions that raise :class:`~tf_hooks.elastic.keras.KerasVersionError`
  with the way out, so such a script fails at the line that uses them instead of training unsynchronised.
  They are refused rather than replaced by the project's Keras 3 versions
  (:func:`tf_hooks.elastic.optimizer.allreduce_gradients`, :class:`tf_hooks.elastic.state.ElasticState`):
  a script that calls them would train unsynchronised under ``horovodrun`` still, and one that works only
  here is not the script the user wrote. The way out names tf_keras (Keras 2, where Horovod's helpers
  work) and, for Keras 3, :class:`tf_hooks.elastic.keras.ElasticKerasTrainer` or a custom loop.

Nothing here imports TensorFlow or Horovod: it waits for the script to do so.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

#: Where ``HorovodBasics`` (whose ``init`` every binding calls) is defined.
BASICS_MODULE = "horovod.common.basics"
#: Where ``TensorFlowKerasState`` (the base of ``KerasState``) is defined.
TF_ELASTIC_MODULE = "horovod.tensorflow.elastic"
#: Where ``OwnedIterator``, the iterator of a ``tf.data`` dataset in eager mode, is defined.
TF_ITERATOR_MODULE = "tensorflow.python.data.ops.iterator_ops"
#: How long the interpreter's exit waits for dropped ``tf.data`` iterators to be freed.
EXIT_FREE_S = 60.0
#: How long the thread that frees them waits for whoever handed one over to let go of it.
LET_GO_S = 1.0
#: Horovod's Keras bindings, and their helpers that need Keras 2 (attribute paths in the module).
KERAS_MODULES = ("horovod.tensorflow.keras", "horovod.keras")
KERAS2_ONLY = (
    "DistributedOptimizer",
    "broadcast_global_variables",
    "load_model",
    "elastic.KerasState",
    "callbacks.BroadcastGlobalVariablesCallback",
    "callbacks.MetricAverageCallback",
)
#: Exit status of a process that left the ring on the agent's request.
LEFT_RING = 0

_installed = False


def install() -> None:
    """Hooks Horovod's ``init`` and Keras binding in this process (idempotent). Never raises."""
    global _installed
    if _installed:
        return
    _installed = True
    if BASICS_MODULE in sys.modules:
        _patch_basics(sys.modules[BASICS_MODULE])
    hooks: dict[str, Callable[[ModuleType], None]] = {
        BASICS_MODULE: _patch_basics,
        TF_ELASTIC_MODULE: _patch_keras_state,
        TF_ITERATOR_MODULE: _patch_iterator,
        **dict.fromkeys(KERAS_MODULES, _guard_keras),
    }
    for name, hook in hooks.items():
        if name in sys.modules:
            hook(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(hooks))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after it is executed, whoever imports it."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.get(fullname)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, hook)
        return spec


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks and tools
        return getattr(self.loader, name)


def _patch_basics(module: ModuleType) -> None:
    basics = getattr(module, "HorovodBasics", None)
    if basics is None or getattr(basics.init, "_submarine_autojoin", False):
        return
    original = basics.init

    def init(self: Any, *args: Any, **kwargs: Any) -> Any:
        join_or_leave()
        release_previous_ring()
        before = tcp_sockets()
        result = original(self, *args, **kwargs)
        _ring_sockets.update({fd: ino for fd, ino in tcp_sockets().items() if before.get(fd) != ino})
        from tf_hooks.elastic import ring

        ring.after_init()
        return result

    init._submarine_autojoin = True  # type: ignore[attr-defined]
    init.__doc__ = original.__doc__
    basics.init = init


def _patch_iterator(module: ModuleType) -> None:
    iterator = getattr(module, "OwnedIterator", None)
    if iterator is None or hasattr(iterator, "__del__"):
        return  # a TensorFlow whose iterator frees itself its own way: left alone

    def __del__(self: Any) -> None:  # noqa: N807 (the finalizer's name)
        resource = self.__dict__.get("_iterator_resource")
        if resource is not None and not sys.is_finalizing():
            iterator_graveyard.bury(resource)
        # While the interpreter is torn down (an iterator held in a module global until exit) no thread can
        # start or run: the resource is freed here, with the iterator, as TensorFlow itself would.

    iterator.__del__ = __del__


class Graveyard:
    """Frees what it is given on a daemon thread of its own, one after the other (see the module doc).

    The interpreter's exit waits up to :data:`EXIT_FREE_S` for what is still to be freed, so nothing is freed
    while the interpreter is torn down.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def bury(self, obj: object) -> None:
        """Hands ``obj`` (its last reference) over; never blocks. Not to be called once the interpreter is
        finalizing (``sys.is_finalizing()``): a thread started then never runs, and starting it waits for it
        for ever."""
        with self._cond:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
                self._thread.start()
                atexit.register(self.wait, EXIT_FREE_S)
        self._queue.put(obj)

    def _run(self) -> None:
        while True:
            obj: object = self._queue.get()
            # The burier may hold it a moment longer (returning from bury); the last reference is to go here.
            deadline = time.monotonic() + LET_GO_S
            while sys.getrefcount(obj) > 2 and time.monotonic() < deadline:  # 2: ``obj`` and the call's own
                time.sleep(0.001)
            del obj
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Blocks until everything handed over is freed, at most ``timeout`` s; False when that ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)


#: Where dropped ``tf.data`` iterators are freed.
iterator_graveyard = Graveyard("submarine-free-iterators")


def _patch_keras_state(module: ModuleType) -> None:
    state = getattr(module, "TensorFlowKerasState", None)
    if state is None or getattr(state.sync, "_submarine_autojoin", False):
        return
    original = state.sync

    def sync(self: Any) -> None:
        build_optimizer_slots(getattr(self, "model", None), getattr(self, "optimizer", None))
        original(self)

    sync._submarine_autojoin = True  # type: ignore[attr-defined]
    state.sync = sync


def build_optimizer_slots(model: Any, optimizer: Any) -> None:
    """Creates the optimizer's slot variables for the model's weights now, as its first step would.

    Keras 2 optimizers (``tf_keras``) have ``build(var_list)``, which does nothing once built; the
    legacy ones ``_create_all_weights(var_list)``. Anything else is left alone.
    """
    variables = getattr(model, "trainable_variables", None)
    if optimizer is None or not variables:
        return
    if hasattr(optimizer, "build") and not getattr(optimizer, "_built", False):
        optimizer.build(variables)
    elif hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)


#: TCP sockets (fd -> inode) that Horovod's last ``init`` opened: its Gloo ring's connections.
_ring_sockets: dict[int, int] = {}


def tcp_sockets() -> dict[int, int]:
    """This process's open TCP sockets, file descriptor -> inode (Linux ``/proc``; {} elsewhere)."""
    found: dict[int, int] = {}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("socket:["):
            continue
        try:
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if probe.family in (socket.AF_INET, socket.AF_INET6) and probe.type == socket.SOCK_STREAM:
                found[fd] = int(target[8:-1])
        finally:
            probe.close()
    return found


def release_previous_ring() -> int:
    """Shuts down the connections of the ring the last ``init`` joined that are still open (the same
    socket: same fd and inode); returns how many. The file descriptors stay Horovod's to close."""
    released = 0
    current = tcp_sockets()
    for fd, inode in list(_ring_sockets.items()):
        if current.get(fd) == inode:
            try:
                probe = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            try:
                probe.shutdown(socket.SHUT_RDWR)
                released += 1
            except OSError:
                pass
            finally:
                probe.close()
    _ring_sockets.clear()
    if released:
        logger.debug("shut down %d connection(s) of the previous Horovod ring", released)
    return released


def join_or_leave() -> None:
    """What every ``hvd.init()`` does first in an agent-started process.

    The first call blocks until the driver places the process in a ring (the agent's channel). A later
    call first reads what the agent sent and, when the job's driver was lost, waits for its next
    incarnation and takes the new ring's environment (:func:`tf_hooks.elastic.ring.prepare_reinit`);
    then, when the agent asked the process to leave, it exits with :data:`LEFT_RING`.

    Raises:
        tf_hooks.elastic.ring.RingJoinError: the agent went away before the ring formed, or the job's
            driver did not come back.
        SystemExit: the process left the ring on scale-in.
    """
    from submarine_elastic import env
    from tf_hooks.elastic import ring

    if env.settings().agent_fd is not None:
        ring.wait_for_slot()
        return
    ring.prepare_reinit()
    if ring.leave_requested():
        rank = _slot_rank()
        if rank < 0:
            sys.stderr.write("submarine-elastic: this worker left the ring (scale-in); exiting\n")
            sys.stderr.flush()
            raise SystemExit(LEFT_RING)
        # Recorded as ready with a rank (a re-form for another reason came first): Horovod's init would
        # record this process a second time, so it fails instead, and Horovod re-forms without it.
        sys.stderr.write(f"submarine-elastic: asked to leave, but the new ring still gave this worker rank {rank}\n")
        sys.stderr.flush()
        raise SystemExit(1)


def _slot_rank(timeout: float = 600.0) -> int:
    """Asks the job's rendezvous for this process's rank in the ring being formed, as ``hvd.init``
    would (blocks until the ring's other members arrived, at most ``timeout`` s); -1: no slot."""
    import urllib.request  # here: every Python process of the job imports this module at start-up

    host, port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    me, local_rank = os.environ.get("HOROVOD_HOSTNAME"), os.environ.get("HOROVOD_LOCAL_RANK", "0")
    if not (host and port and me):
        return -1
    url = f"http://{host}:{port}/rank_and_size/{me}:{local_rank}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.read().decode().split(",")[0])
    except (OSError, ValueError) as exc:
        logger.warning("could not ask the rendezvous for this worker's slot (%s); leaving", exc)
        return -1


def _guard_keras(module: ModuleType) -> None:
    from tf_hooks.elastic.keras import keras_problem_now

    problem = keras_problem_now()
    if problem is None:
        import tensorflow as tf

        bindings: list[Any] = [module, getattr(module, "callbacks", None)]
        for binding in bindings:
            if binding is not None and hasattr(binding, "K"):
                binding.K = tf.keras.backend
        return
    for path in KERAS2_ONLY:
        owner_path, _, name = path.rpartition(".")
        owner: Any = module
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, name):
            setattr(owner, name, _refusal(f"{module.__name__}.{path}", problem))


def _refusal(what: str, problem: str) -> Callable[..., Any]:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        from tf_hooks.elastic.keras import KerasVersionError

        raise KerasVersionError(f"{what} cannot be used here: {problem}")

    refuse.__qualname__ = refuse.__name__ = what.rpartition(".")[2]
    return refuse


__all__ = [
    "BASICS_MODULE",
    "EXIT_FREE_S",
    "KERAS2_ONLY",
    "Graveyard",
    "KERAS_MODULES",
    "LET_GO_S",
    "LEFT_RING",
    "TF_ELASTIC_MODULE",
    "TF_ITERATOR_MODULE",
    "build_optimizer_slots",
    "install",
    "iterator_graveyard",
    "join_or_leave",
    "release_previous_ring",
    "tcp_sockets",
]
