"""Why a worker failed, in words a user acts on: the records ``submarine job show`` lists.

:func:`exit_failure` reads a training process's exit (as its agent reports it) and says whether it is a failure
and why (it finished without joining the ring, hung, was killed, exited non-zero, before or after it joined);
:func:`lost_failure` records a worker whose container YARN lost; :func:`job_reason` is the job's reason from its
first failure, with the error its stderr ended with (:func:`last_line`). Pure functions of their inputs.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Collection, Mapping, Sequence

from submarine_elastic.elastic.ringhost import LOST_EXIT, AgentHandle
from submarine_elastic.protocol.api import WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb

#: Failures kept per job (the first ones: the first is nearly always the cause of the rest).
MAX_FAILURES = 8
#: The longest reason taken from a process's stderr.
REASON_CHARS = 600
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure)\b")


def describe_exit(code: int) -> str:
    """A process's exit status in words (``was killed by SIGKILL``, ``exited with status 2``)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def exit_failure(agent: AgentHandle, exited: pb.Exited, rank: int, now: float | None = None) -> pb.WorkerFailure | None:
    """The failure ``agent``'s training process is, ending as ``exited`` at ``rank`` (-1: not in the ring); None
    when it is none: it left (scale-in, or its container preempted) or finished after joining the ring."""
    if exited.leaving or agent.preempted or agent.state is WorkerState.LEAVING:
        return None
    code = exited.exit_code
    if code == 0 and exited.joined:
        return None
    if code == 0:
        reason = (
            f"{agent.instance}'s training process finished without joining the job's ring: it never called "
            f"hvd.init(), so it trained alone. Call hvd.init() (any Horovod binding) before training."
        )
    elif exited.hung_seconds > 0:
        reason = (
            f"{agent.instance}'s training process hung: it sent no heartbeat for {exited.hung_seconds:.1f} s, "
            f"so its agent killed it and the ring re-formed without it"
        )
    else:
        reason = f"{agent.instance}'s training process {describe_exit(code)}" + (
            "" if exited.joined else " before it joined the ring"
        )
    return pb.WorkerFailure(
        time=time.time() if now is None else now,
        instance=agent.instance,
        container_id=agent.container_id,
        rank=rank,
        exit_code=code,
        reason=reason,
        stderr_tail=exited.stderr_tail,
        log_path=exited.log_path,
    )


def lost_failure(agent: AgentHandle, reason: str, rank: int, now: float | None = None) -> pb.WorkerFailure:
    """The failure of a worker whose container YARN lost (its agent told to stop, as by SIGTERM)."""
    return pb.WorkerFailure(
        time=time.time() if now is None else now,
        instance=agent.instance,
        container_id=agent.container_id,
        rank=rank,
        exit_code=-int(signal.SIGTERM),
        reason=reason,
    )


def job_reason(failure: pb.WorkerFailure) -> str:
    """The job's reason from a failed process: its reason, and the error its stderr ended with. For a process
    killed from outside (SIGKILL, SIGTERM: an operator, the OOM killer, its agent finding it hung) only an
    exception its stderr ends with: its last line may say nothing of why (in a chaos run, TensorFlow's start-up
    notice)."""
    killed = failure.exit_code in (-signal.SIGKILL, -signal.SIGTERM)
    last = last_line(failure.stderr_tail, exceptions_only=killed) if failure.exit_code != 0 else ""
    return failure.reason + (f": {last}" if last else "")


def last_line(text: str, *, exceptions_only: bool = False) -> str:
    """The exception a traceback ends with (from its first line on), else the last non-empty line (nothing with
    ``exceptions_only``)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[i]):
            return " ".join(line.strip() for line in lines[i:])[:REASON_CHARS]
    return lines[-1].strip()[:REASON_CHARS] if lines and not exceptions_only else ""


def lost_on_the_way(failed: Mapping[str, int], finished: Collection[str]) -> bool:
    """Whether a job whose Horovod results list ``failed`` workers (slot -> exit code) finished all the same:
    a worker finished its training in the ring (``finished``), and every failed one was killed by a signal (a
    worker lost on the way: hung and killed by its agent, a fault), none ended with an error of its own (an exit
    code above 0: the script's). Horovod lists such a worker when its exit reaches it after the last worker
    finished (seen in a chaos run: a worker killed 2.6 s before rank 0 finished failed the job)."""
    return bool(failed) and bool(finished) and all(code < 0 for code in failed.values())


def ended_by(error_message: str, failed: Mapping[str, int], lost: Sequence[str]) -> str:
    """The job's reason when Horovod ended it and no process's failure says why: the workers lost with their
    agents (``lost``, their instances, ended :data:`LOST_EXIT`) when every failed slot was one of those, else
    Horovod's own words (``error_message``, else the ``failed`` slots and their exit codes)."""
    if lost and failed and not error_message and all(code == LOST_EXIT for code in failed.values()):
        them = "its agent" if len(lost) == 1 else "their agents"
        return (
            f"{', '.join(lost)} lost with {them} (no word past the re-attach grace: the agent killed, its container "
            f"or host gone), and no worker of the ring was left to go on; Horovod ended the job ({dict(failed)})"
        )
    return f"Horovod ended the job: {error_message or dict(failed)}"
