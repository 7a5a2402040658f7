"""The YARN client's reconciliation of one component with its target: desired vs observed in, actions out.

What YARN is asked (a flex to the target count, a decommission of named instances) is sent at the first read
that needs it and again after :data:`REFLEX_AFTER_POLLS` reads without effect (a lost PUT, an AM restart); one
that failed is sent again at the next read. A flex that a decommission's effect calls for goes at the read that
shows it: the ResourceManager counts a decommissioned instance out of the desired count as it lists it (one
transition), so the flex cannot overtake the decommission and remove an instance of its own choosing.

Converged means desired == READY == listed containers == target, with no instance to remove listed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from .api import (
    ComponentNotFoundError,
    ComponentTarget,
    ReconcileResult,
    RMUnreachableError,
    ServiceState,
    ServiceStateError,
    ServiceStatus,
    YarnError,
    YarnRequestError,
    YarnTimeoutError,
)

__all__ = ["REFLEX_AFTER_POLLS", "RUNNING_STATES", "Reconciliation", "ServiceCalls"]

#: The states of a running service, whose components YARN flexes.
RUNNING_STATES = frozenset({ServiceState.STARTED, ServiceState.STABLE, ServiceState.FLEX})
#: A flex (or decommission) that the RM has not taken up is sent again after this many reads.
REFLEX_AFTER_POLLS = 10
#: errors reconcile keeps trying through: the RM down or restarting, a service not running *yet*.
_TRANSIENT = (RMUnreachableError, ServiceStateError, YarnRequestError)


class ServiceCalls(Protocol):
    """The calls a reconciliation makes, each one request (:class:`~submarine_elastic.yarn.client.YarnServiceClient`'s).

    Raises (each): YarnError or a subclass, which ends the step.
    """

    def status(self, name: str) -> ServiceStatus: ...

    def flex(self, name: str, component: str, n: int) -> None: ...

    def decommission(self, name: str, component: str, instances: Sequence[str]) -> None: ...


class Reconciliation:
    """One call of :meth:`YarnServiceClient.reconcile`: what it read last, what it sent, what failed.

    Each :meth:`step` reads the service once (``rm.status``) and, where the RM's state differs from the target,
    sends what closes the gap (``rm.decommission`` of the named instances still listed, else ``rm.flex`` to the
    count); the caller polls it until it returns a result.
    """

    def __init__(
        self, client: ServiceCalls, name: str, component: str, target: ComponentTarget, clock: Callable[[], float]
    ) -> None:
        self.client, self.name, self.component, self.target, self.clock = client, name, component, target, clock
        self.start = clock()
        self.last: ServiceStatus | None = None
        self.transient: YarnError | None = None
        self.flexed = False
        self.decommissioned: tuple[str, ...] = ()
        self.sent: tuple[str, int | tuple[str, ...]] | None = None  # the last request sent, as (call, argument)
        self.reads_since_sent = 0

    def step(self) -> ReconcileResult | None:
        """Read the state once and act on it; the result when reconciliation is over, else None."""
        try:
            self.last = self.client.status(self.name)
            self.transient = None
            comp = self.last.component(self.component)
            if comp is None and self.last.components:
                missing = ComponentNotFoundError(f"service {self.name!r} has no component {self.component!r}")
                return self.result(False, missing)
            if self.last.is_terminal:
                return self.result(False, ServiceStateError(f"cannot reconcile: {self.last.describe()}"))
            if comp is None:
                return None  # the AM does not report components yet
            listed = {c.component_instance_name for c in comp.containers}
            going = [i for i in self.target.remove if i in listed]
            count = self.target.count
            if not going and comp.number_of_containers == count == comp.ready_count == len(comp.containers):
                return self.result(True, None)
            self.reads_since_sent += 1
            undecided = tuple(i for i in going if i not in comp.decommissioned)
            needed: tuple[str, int | tuple[str, ...]] | None = (
                ("decommission", undecided) if undecided
                else ("flex", count) if comp.number_of_containers != count
                else None
            )  # fmt: skip
            if (
                needed is not None
                and self.last.state in RUNNING_STATES
                and (needed != self.sent or self.reads_since_sent >= REFLEX_AFTER_POLLS)
            ):
                if undecided:
                    self.client.decommission(self.name, self.component, undecided)
                    self.decommissioned = tuple(dict.fromkeys((*self.decommissioned, *undecided)))
                else:
                    self.client.flex(self.name, self.component, count)
                    self.flexed = True
                self.sent, self.reads_since_sent = needed, 0
        except _TRANSIENT as exc:
            self.transient = exc
        except YarnError as exc:
            return self.result(False, exc)
        return None

    def timed_out(self) -> ReconcileResult:
        """The result of a reconciliation whose time ran out, naming what it waited for and the last state."""
        seen = self.last.describe() if self.last is not None else "nothing read"
        why = f"; last error: {self.transient}" if self.transient is not None else ""
        gone = f" without {', '.join(self.target.remove)}" if self.target.remove else ""
        message = (
            f"timed out after {self.clock() - self.start:g}s waiting for {self.target.count} READY "
            f"{self.component} containers{gone} of service {self.name!r}; last state: {seen}{why}"
        )
        return self.result(False, YarnTimeoutError(message, last_state=self.last))

    def result(self, converged: bool, error: YarnError | None) -> ReconcileResult:
        """The reconciliation's result as of its last read."""
        comp = self.last.component(self.component) if self.last is not None else None
        ready = comp.ready_containers if comp is not None else ()
        return ReconcileResult(
            service=self.name,
            component=self.component,
            target=self.target.count,
            desired=comp.number_of_containers if comp is not None else None,
            ready=len(ready),
            ready_instances=tuple(c.component_instance_name for c in ready),
            service_state=self.last.state if self.last is not None else None,
            converged=converged,
            flexed=self.flexed,
            decommissioned=self.decommissioned,
            error=error,
            elapsed_s=self.clock() - self.start,
        )
