"""How a relaunched job driver takes over the ring its predecessor left, without costing a committed step.

The workers train on while the driver is gone (Gloo's ring needs no driver); their agents re-attach to the next
incarnation saying where they stand (:class:`pb.Resume`). An :class:`Adopter`:

1. :meth:`Adopter.admit`: sets each (re-)attaching agent's state from its Resume, or says why it is refused
   (a worker this driver already counted out, one that trains in a ring this driver's predecessor did not
   form, or one its predecessor's ring re-formed without: :attr:`DriverState.ring`); one that trains in the
   predecessor's ring is ADOPTED (:class:`~submarine_elastic.protocol.api.Adoption`).
2. :meth:`Adopter.await_ring`: waits (up to :data:`ADOPT_WAIT_S`) for the predecessor's ring to re-attach; with
   at least ``--min_workers`` of it back the registry offers Horovod only the adopted workers, in their old rank
   order, so rank 0 is a worker holding the committed state, never a fresh joiner.
3. :meth:`Adopter.await_reform`: once that ring re-formed around this driver's rendezvous (each adopted worker
   sent ``Reform`` with its new slot, applied at its next commit), warm joiners are admitted again.

When none of a ring that trained came back (the whole job was lost at once: every container killed, a power
loss, a cluster restarted), a new ring forms and its rank 0 resumes from the job's newest checkpoint; a job
that writes none (no ``--checkpoint_path``) has lost what it trained, and :attr:`Adopter.lost` says so: the
driver ends the job with that reason instead of training again from step 0.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.elastic.horovod_adapter import ElasticDriver, ring_registered
from submarine_elastic.elastic.ringhost import AgentHandle, AgentRegistry
from submarine_elastic.protocol.api import Adoption, AgentState, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import RING_GONE, WHOLE_JOB_LOST, DriverState

log = logging.getLogger("submarine_elastic.driver")

#: How long a new driver incarnation waits for the workers of the previous one to re-attach before it forms
#: its ring with those that did (at least ``--min_workers``).
ADOPT_WAIT_S = 20.0
#: How long it offers Horovod only the adopted workers while their ring re-forms (then joiners are admitted).
ADOPT_RING_S = 120.0
#: The driver's state of a worker its agent re-attaches in, by what the agent says of its process.
RESUMED_AS = {
    AgentState.STARTING: WorkerState.ATTACHED,
    AgentState.WARM: WorkerState.WARM,
    AgentState.RUNNING: WorkerState.RUNNING,
}
#: A checkpoint's file name (``tf_hooks.elastic.checkpoint``): its commit count.
_CHECKPOINT = re.compile(r"ckpt-(\d{12})\.npz")


class Adopter:
    """The adoption of one driver incarnation, given what its predecessor left (``previous``; None for the job's
    first driver)."""

    def __init__(self, registry: AgentRegistry, previous: DriverState | None, min_workers: int) -> None:
        self._registry = registry
        self._previous = previous
        if previous is not None:  # until this driver opens a ring of its own
            registry.ring = previous.ring
        self._min_workers = min_workers
        #: Why the job cannot go on ('' while it can): its whole ring was lost and no checkpoint holds its state.
        self.lost = ""
        #: What a new ring resumes from when the whole ring was lost ('' when it was not), for the timeline.
        self.resumed = ""

    def admit(self, agent: AgentHandle, resume: pb.Resume | None, *, incarnation: int, ring_formed: bool) -> str:
        """Sets a (re-)attaching agent's state from where it says its process stands (``resume``; None: a new
        agent) to driver incarnation ``incarnation``, whose ring has formed or not (an agent of an earlier ring
        cannot come back into it after that); returns why it is refused ('' when it is not)."""
        state, refusal = resumed_state(agent, resume)
        if state is None:
            return refusal
        known = self._registry.get(agent.agent_id)
        if known is not None and known.state.ended:
            return f"{agent.instance} was counted out of the job ({known.state.value}); it cannot rejoin its ring"
        if state in (AgentState.STOPPING, AgentState.EXITED):
            return f"{agent.instance}'s training process is ending"
        ring = self._previous.ring if self._previous is not None else ()
        if state is AgentState.RUNNING and ring and agent.agent_id not in ring:
            # The previous driver's ring went on without it: it counted it out (its host cut off, say) and opened a
            # ring of the others, which committed steps this worker never saw. Adopted, it would train them again.
            return f"{agent.instance} trains in a ring its previous driver had re-formed without; it cannot rejoin"
        if state is AgentState.WARM:
            agent.state, agent.joined = WorkerState.WARM, True
        elif state is AgentState.RUNNING and resume is not None:
            if resume.driver_incarnation == incarnation:
                return f"{agent.instance} lost this driver's stream and its ring re-formed without it"
            if ring_formed:
                return f"{agent.instance} trains in a ring of an earlier driver; this one's ring has formed since"
            agent.state, agent.joined = WorkerState.RUNNING, True
            agent.adoption, agent.adopted_rank = Adoption.ADOPTED, resume.rank
        elif state is AgentState.LEAVING:
            agent.state, agent.joined = WorkerState.LEAVING, True
        return ""

    def take_back(
        self, agent: AgentHandle, resume: pb.Resume | None, batch: pb.Target | None
    ) -> tuple[AgentHandle, str]:
        """An agent this driver holds, not ended, attaching again: it lost its stream (the driver was paused
        past the stream's keepalive, the network was cut a moment) while its process trained on. It takes its
        place back, in its ring as it was, when its process stands where the driver thinks (its Resume's state),
        and is sent the job's ``batch`` (None: never set). Otherwise a command of the lost stream moved it on and
        it is refused: it is counted lost once its grace ends. Returns the handle its stream serves and why it is
        refused ('' when it is not)."""
        state, refusal = resumed_state(agent, resume)
        if state is None:
            return agent, refusal
        held = RESUMED_AS.get(state)
        known = self._registry.take_back(agent.agent_id, agent.container_id, held) if held is not None else None
        if known is None:
            was = self._registry.get(agent.agent_id)
            return agent, (
                f"{agent.instance} re-attached {state.value} while this driver holds it "
                f"{was.state.value if was is not None else 'nowhere'}: a command was lost with its stream"
            )
        if batch is not None:
            known.commands.put(pb.AgentCommand(target=batch))
        log.warning(
            "agent re-attached: %s (%s) after its stream was lost; its ring stands", known.instance, known.agent_id
        )
        return known, ""

    def await_ring(self, fatal: threading.Event) -> bool:
        """Waits (up to :data:`ADOPT_WAIT_S`, or until ``fatal`` is set) for the previous incarnation's ring to
        re-attach; True when at least ``--min_workers`` of it did: the registry then offers Horovod only them
        until :meth:`await_reform` (False at once for the job's first driver)."""
        previous = self._previous
        if previous is None:
            return False
        if previous.error.startswith(WHOLE_JOB_LOST):
            # A predecessor concluded it already, and was relaunched before YARN ended the service: after a power
            # loss a NodeManager relaunches the driver's container while the service's new ApplicationMaster
            # attempt, which knows nothing of that container, starts another.
            self.lost = previous.error
            log.error("%s", self.lost)
            return False
        self._registry.adopting = True
        # The ring's size it recorded last; a predecessor that died before it recorded its ring left its target.
        expected = previous.world_size or previous.target
        log.info("waiting up to %.0f s for the %d workers of the previous ring to re-attach", ADOPT_WAIT_S, expected)

        def settled() -> bool:
            # Every adoptable worker is back, or as many agents as the ring had are attached (the rest are new).
            attached = sum(1 for a in self._registry.snapshot() if a.connected)
            return len(self._registry.available()) >= expected or attached >= expected or fatal.is_set()

        self._registry.wait(settled, ADOPT_WAIT_S)
        adopted = len(self._registry.available())
        if adopted >= self._min_workers and not fatal.is_set():
            log.warning(
                "adopting %d of the previous ring's %d workers; their ring re-forms at their next commit",
                adopted,
                expected,
            )
            return True
        log.warning(
            "%d of the previous ring's %d workers kept training (need %d to adopt them): forming a new ring%s",
            adopted,
            expected,
            self._min_workers,
            " (the whole job was lost: training resumes from its last checkpoint, if it writes any)"
            if adopted == 0
            else "",
        )
        checkpoints = env.settings().checkpoint_path
        if adopted == 0 and previous.world_size and checkpoints and not fatal.is_set():
            self.resumed = (
                f"{RING_GONE} (a ring of {previous.world_size}; the whole job was lost, or stopped, at once): a new "
                f"ring {newest_checkpoint(checkpoints)}"
            )
            log.warning("%s", self.resumed)
        elif adopted == 0 and previous.world_size and not checkpoints and not fatal.is_set():
            self.lost = (
                f"{WHOLE_JOB_LOST}: no worker of its ring of {previous.world_size} outlived the previous driver (every "
                f"container of the job died at once, as in a power loss or a cluster restart), and it writes no "
                f"checkpoint (--checkpoint_path): what it trained is lost; run it again, with --checkpoint_path to "
                f"resume after such a loss"
            )
        if self.lost:
            log.error("%s", self.lost)
        self._registry.end_adoption()
        return False

    def await_reform(self, ring: ElasticDriver, adopted: int, me: pb.DriverIncarnation) -> None:
        """Blocks (up to :data:`ADOPT_RING_S`) until the adopted ring of ``adopted`` workers re-formed around this
        driver (its rank 0 registered Horovod's notification service with this rendezvous, so later host changes
        reach it), recording when in ``me``; then admits warm joiners again."""
        deadline = time.monotonic() + ADOPT_RING_S
        while time.monotonic() < deadline and not ring.finished():
            if ring_registered(ring):
                me.adopted_workers = adopted
                me.recovered_after = time.time() - me.started
                log.info(
                    "the adopted ring of %d re-formed %.1f s after this driver started", adopted, me.recovered_after
                )
                break
            time.sleep(0.2)
        else:
            log.warning("the adopted ring did not register with this driver within %.0f s", ADOPT_RING_S)
        self._registry.end_adoption()


def newest_checkpoint(directory: str) -> str:
    """What a new ring resumes from, said for the job's timeline: the newest checkpoint in ``directory`` (by the
    commit count in its name) where the driver can list it, else the directory."""
    try:
        commits = sorted(int(m.group(1)) for name in os.listdir(directory) if (m := _CHECKPOINT.fullmatch(name)))
    except FileNotFoundError:
        commits = []
    except OSError:
        return f"resumes from the newest checkpoint in {directory}"
    if not commits:
        return f"starts from step 0: no checkpoint in {directory} yet"
    return f"resumes from the newest checkpoint, of commit {commits[-1]} ({directory})"


def stopped_run(state_file: Path | None, app: str) -> DriverState | None:
    """The state another application of this job left (YARN started the service again after it stopped:
    ``yarn app -stop``, then ``-start``); None when there is none."""
    if state_file is None:
        return None
    try:
        old = DriverState.from_json(state_file.read_bytes())
    except (OSError, ValueError):
        return None
    return old if old.app and old.app != app else None


def restart_reason(stopped: DriverState, app: str, workers: int) -> str:
    """Why the job's ring starts anew, for its timeline: YARN started its service again (application ``app``)
    after the run that left ``stopped`` (``yarn app -stop``, then ``-start``), at ``workers`` (the target that run
    had, which YARN's saved definition holds too), and what the training resumes from (its checkpoint) or lost."""
    checkpoint = env.settings().checkpoint_path
    resumes = (
        f"the training resumes from its checkpoint in {checkpoint} (the steps since it are trained again)"
        if checkpoint
        else "no --checkpoint_path: the training starts again from its first step, what it trained is lost"
    )
    return (
        f"started again by YARN ({app or 'a new application'}) after {stopped.app} stopped "
        f"(yarn app -stop, -start): a new ring at {workers} workers; {resumes}"
    )


def resumed_state(agent: AgentHandle, resume: pb.Resume | None) -> tuple[AgentState | None, str]:
    """Where a (re-)attaching agent says its process stands (``resume``; None: a new agent, STARTING), or None
    and why it is refused when its Resume names no state of an agent."""
    try:
        return (AgentState.from_wire(resume.state) if resume is not None else AgentState.STARTING), ""
    except ValueError as exc:
        return None, f"{agent.instance} resumes in no state of an agent: {exc}"
