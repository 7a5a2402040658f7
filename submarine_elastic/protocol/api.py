"""Errors, states and value types that the job runtime (driver, agents), the training side, the submit side and
the controller share.

Three state machines run a job; each is an enum whose legal transitions are listed in its docstring and in
its :class:`~submarine_elastic.states.Transitions` table (:data:`MACHINES`, the project's one state-machine
rule), enforced by :func:`advance` (an illegal one raises :class:`IllegalTransitionError`), as
``torch.distributed.elastic``'s ``WorkerState`` does:

- :class:`JobPhase`: the job as its driver sees it (``JobStatus.phase`` on the wire, as ``elastic.proto``'s
  enum of the same name: ``.wire`` and ``from_wire`` convert);
- :class:`WorkerState`: one worker as the driver sees it (``WorkerStatus.state``);
- :class:`AgentState`: the training process as its own agent sees it;

and one that never travels: :class:`Adoption`, whether a worker trains in a ring an earlier driver formed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Self, TypeVar

from submarine_elastic import states
from submarine_elastic.limits import MAX_BATCH_SIZE

DRIVER_COMPONENT = "driver"
WORKER_COMPONENT = "worker"


class ElasticError(Exception):
    """Base of every error of the job runtime (``submarine_elastic.elastic``) and its protocol."""


class DriverUnreachableError(ElasticError):
    """The job's driver could not be located or did not answer."""


class FlexRefusedError(ElasticError):
    """A resize outside the job's limits, or while the job cannot resize."""


class GlooInterfaceError(ElasticError):
    """The interface the ranks are told to use (``SUBMARINE_GLOO_IFACE``, or the one holding the driver's
    address) has no IPv4 address for Horovod's rendezvous to listen on."""


class IllegalTransitionError(ElasticError, states.IllegalTransitionError):
    """A state change that the state machine does not allow: a bug, or a peer breaking the protocol (the shared
    :class:`submarine_elastic.states.IllegalTransitionError`, caught as an :class:`ElasticError` too).

    Attributes:
        what: whose state it is (``job mnist``, ``worker-2``).
        current, requested: the state it is in and the one asked for.
    """

    def __init__(self, what: str, current: StrEnum, requested: StrEnum) -> None:
        super().__init__(what, current, requested, MACHINES[type(current)].allowed(current))


class WireState(StrEnum):
    """A state machine's state that travels as ``elastic.proto``'s enum of the class's name
    (``JOB_<NAME>``, ``WORKER_<NAME>``, ``AGENT_<NAME>``)."""

    @property
    def wire(self) -> int:
        """Its value in the proto's enum."""
        return _wire(self)

    @classmethod
    def from_wire(cls, value: int) -> Self:
        """The state a message carries.

        Raises:
            ValueError: it is none of this machine's states (naming the value).
        """
        return _from_wire(cls, value)


class JobPhase(WireState):
    """A job as its driver sees it; ``JobStatus.phase`` on the wire.

    Transitions::

        WAITING -> RUNNING    the ring formed (enough warm workers)
        WAITING -> FAILED     the ring did not form in time, or a worker failed before it did
        RUNNING -> FINISHED   every worker exited cleanly
        RUNNING -> FAILED     Horovod ended the job, or a worker failed in a way that ends it
    """

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


class WorkerState(WireState):
    """One worker (one agent incarnation) as the driver sees it; the value is ``WorkerStatus.state``
    on the wire, except that LEFT is sent as ``exited`` (with exit code 0), as it always was.

    Transitions::

        ATTACHED -> WARM            its training process asked to join a ring (hvd.init())
        WARM     -> RUNNING         Horovod gave it a slot and the driver sent Start
        WARM, RUNNING -> LEAVING    chosen on scale-in: told to Leave, withdrawn from discovery
        LEAVING  -> LEFT            its process ended (or its agent went) after it was told to leave
        ATTACHED, WARM, RUNNING -> EXITED   its process ended on its own (finished or failed),
                                            or its agent went away
    """

    ATTACHED = "attached"
    WARM = "warm"
    RUNNING = "running"
    LEAVING = "leaving"
    LEFT = "left"
    EXITED = "exited"

    @property
    def wire(self) -> int:
        """Its ``WorkerState`` value in ``elastic.proto`` (``WORKER_<NAME>``): a LEFT worker reads
        ``WORKER_EXITED`` there."""
        return _wire(WorkerState.EXITED if self is WorkerState.LEFT else self)

    @property
    def ended(self) -> bool:
        """Its training process is gone (LEFT or EXITED)."""
        return self in (WorkerState.LEFT, WorkerState.EXITED)


class AgentState(WireState):
    """The training process as its agent sees it.

    Transitions::

        STARTING -> WARM        the process asked to join a ring (its first hvd.init())
        WARM     -> RUNNING     the driver handed it its slot (Start)
        WARM, RUNNING -> LEAVING    the driver drops it on scale-in (Leave)
        STARTING, WARM, RUNNING, LEAVING -> STOPPING   it is being terminated (Stop, a lost driver, SIGTERM)
        any state but EXITED -> EXITED   the process ended
    """

    STARTING = "starting"
    WARM = "warm"
    RUNNING = "running"
    LEAVING = "leaving"
    STOPPING = "stopping"
    EXITED = "exited"

    @property
    def asked_to_end(self) -> bool:
        """The driver (or YARN) asked the process to go: its exit is no failure."""
        return self in (AgentState.LEAVING, AgentState.STOPPING)


class Adoption(StrEnum):
    """Whether a worker trains in a ring an earlier incarnation of the job's driver formed, as the driver sees it.

    Transitions::

        NONE    -> ADOPTED    it re-attached training in the previous incarnation's ring (its Resume said so)
        ADOPTED -> REFORMED   it was sent this incarnation's Reform (its ring re-forms around this driver)
    """

    NONE = "none"
    ADOPTED = "adopted"
    REFORMED = "reformed"


_J, _W, _A, _D = JobPhase, WorkerState, AgentState, Adoption
#: Each machine's transitions (no state moves to itself).
MACHINES: Mapping[type[StrEnum], states.Transitions[StrEnum]] = {
    JobPhase: states.Transitions(
        JobPhase,
        {
            _J.WAITING: {_J.RUNNING, _J.FAILED},
            _J.RUNNING: {_J.FINISHED, _J.FAILED},
            _J.FINISHED: (),
            _J.FAILED: (),
        },
    ),
    WorkerState: states.Transitions(
        WorkerState,
        {
            _W.ATTACHED: {_W.WARM, _W.EXITED},
            _W.WARM: {_W.RUNNING, _W.LEAVING, _W.EXITED},
            _W.RUNNING: {_W.LEAVING, _W.EXITED},
            _W.LEAVING: {_W.LEFT},
            _W.LEFT: (),
            _W.EXITED: (),
        },
    ),
    AgentState: states.Transitions(
        AgentState,
        {
            _A.STARTING: {_A.WARM, _A.STOPPING, _A.EXITED},
            _A.WARM: {_A.RUNNING, _A.LEAVING, _A.STOPPING, _A.EXITED},
            _A.RUNNING: {_A.LEAVING, _A.STOPPING, _A.EXITED},
            _A.LEAVING: {_A.STOPPING, _A.EXITED},
            _A.STOPPING: {_A.EXITED},
            _A.EXITED: (),
        },
    ),
    Adoption: states.Transitions(Adoption, {_D.NONE: {_D.ADOPTED}, _D.ADOPTED: {_D.REFORMED}, _D.REFORMED: ()}),
}

_S = TypeVar("_S", JobPhase, WorkerState, AgentState, Adoption)
_Wired = TypeVar("_Wired", bound=WireState)

#: The states' numbers on the wire (``elastic.proto``'s enums; tests/unit/test_elastic_states.py checks they
#: match): 0 is each enum's UNSPECIFIED, never a state. Kept here so that reading a state needs no protobuf.
#: One table per machine: the StrEnums' members compare equal across machines ("running").
_WIRE_OF: Mapping[type[StrEnum], Mapping[StrEnum, int]] = {
    JobPhase: {p: n for n, p in enumerate(JobPhase, start=1)},
    WorkerState: {s: n for n, s in enumerate([s for s in WorkerState if s is not WorkerState.LEFT], start=1)},
    AgentState: {s: n for n, s in enumerate(AgentState, start=1)},
}


def _wire(state: StrEnum) -> int:
    return _WIRE_OF[type(state)][state]


def _from_wire(kind: type[_Wired], value: int) -> _Wired:
    for state, number in _WIRE_OF[kind].items():
        if number == value:
            return kind(state)
    raise ValueError(f"{value!r} is not a {kind.__name__} on the wire")


def can_advance(current: _S, requested: _S) -> bool:
    """Whether ``current -> requested`` is one of the machine's transitions."""
    return MACHINES[type(current)].can(current, requested)


def advance(what: str, current: _S, requested: _S) -> _S:
    """``requested``, when ``current -> requested`` is legal.

    Raises:
        IllegalTransitionError: it is not (naming ``what``, both states and the allowed ones).
    """
    if not can_advance(current, requested):
        raise IllegalTransitionError(what, current, requested)
    return requested


@dataclass(frozen=True)
class BatchLimits:
    """The global batch sizes a job lets its batch be set to, ``[min, max]`` (``job run --min_batch_size``
    and ``--max_batch_size``, or ``--batch_size`` for both: a fixed batch).

    Raises:
        ValueError: a size below 1 or above :data:`~submarine_elastic.limits.MAX_BATCH_SIZE` (the largest batch
            a worker may report), or ``min`` above ``max`` (naming the flag).
    """

    min: int
    max: int

    def __post_init__(self) -> None:
        for flag, value in (("--min_batch_size", self.min), ("--max_batch_size", self.max)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
            if value > MAX_BATCH_SIZE:
                raise ValueError(
                    f"{flag} {value} is above {MAX_BATCH_SIZE}, the largest batch a job's workers may report"
                )
        if self.min > self.max:
            raise ValueError(f"--min_batch_size {self.min} is above --max_batch_size {self.max}")


@dataclass(frozen=True)
class Limits:
    """A job's worker limits: it starts with ``num`` and stays within ``[min, max]``.

    Raises:
        ValueError: a count below 1, or ``min <= num <= max`` violated (naming the flag).
    """

    num: int
    min: int
    max: int

    def __post_init__(self) -> None:
        for flag, value in (("--num_workers", self.num), ("--min_workers", self.min), ("--max_workers", self.max)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        if not self.min <= self.num <= self.max:
            raise ValueError(
                f"--num_workers {self.num} must lie within --min_workers {self.min} and --max_workers {self.max}"
            )

    def check_target(self, workers: int) -> None:
        """Raises FlexRefusedError naming the limit ``workers`` breaks."""
        if workers > self.max:
            raise FlexRefusedError(f"{workers} workers is above the job's --max_workers {self.max}")
        if workers < self.min:
            raise FlexRefusedError(f"{workers} workers is below the job's --min_workers {self.min}")


@dataclass(frozen=True)
class Verdict:
    """Whether a job is at its target: its ring (``ring_at_target``: the target's ranks, nobody leaving) and
    also YARN (``converged``); ``lag`` says why not ('' when converged)."""

    ring_at_target: bool
    converged: bool
    lag: str


def verdict(
    target: int,
    ring: int,
    leaving: Sequence[str],
    yarn_ready: int | None,
    yarn_error: str = "",
    *,
    yarn_settled: bool = True,
) -> Verdict:
    """The driver's reconcile step's answer; the controller judges a driver's status by the same rule. The ring
    is at the target when it has ``target`` ranks and nobody is leaving; the job has converged when, besides,
    YARN's READY workers (``yarn_ready``, as the driver last read them; None: not known) equal ``target``.
    ``yarn_error``: why YARN does not have the target yet, when the driver knows. ``yarn_settled``: False while
    the driver still reconciles YARN with the target (containers beyond it still listed, or an instance it
    removes), which YARN's READY count alone does not show."""
    ring_why = []
    if leaving:
        ring_why.append(f"leaving: {', '.join(leaving)}")
    if ring != target:
        ring_why.append(f"ring has {ring} of {target}")
    yarn_why = []
    if yarn_ready is None:
        yarn_why.append("YARN's workers unknown")
    elif yarn_ready != target:
        yarn_why.append(f"YARN has {yarn_ready} of {target}")
    elif not yarn_settled:
        yarn_why.append(f"YARN has {yarn_ready} of {target} READY, other worker containers not gone yet")
    why = yarn_why + ring_why
    if why and yarn_error:
        why.append(yarn_error)
    return Verdict(ring_at_target=not ring_why, converged=not why, lag="; ".join(why))
