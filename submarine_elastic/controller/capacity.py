"""Worker slots from what YARN reports: nodes with memory, vcores and GPUs, jobs with their container sizes.

The policy engine splits worker slots (it knows neither YARN nor container sizes); this module turns the
ResourceManager's view into slots the way YARN places containers:

- a slot is one worker container of the largest worker size among the jobs (memory, vcores and GPUs taken
  separately, so the unit fits every job's worker);
- a node holds as many slots as its free memory, its free vcores *and*, for a unit that asks GPUs, its free
  GPUs allow, each node on its own (a worker never spans two nodes, so 1.5 slots free on each of two nodes are
  no slot): a job of 1-GPU workers on nodes of 2 free GPUs gets 2 slots per node, however much memory is free,
  and an arrival's GPUs come from the slots the elastic jobs give back;
- containers a job still waits for that are not workers (its ApplicationMaster, its driver) take room
  first, on the node where they cost the fewest slots;
- each worker a job holds gives one slot back when it goes (it frees its own size on its node).

Capacity is then what the jobs hold plus what is free. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from submarine_elastic.controller.api import JobFootprint, NodeResources, Resources

__all__ = ["CapacityFilter", "SlotCount", "count_slots", "fit", "place", "slot_unit"]


@dataclass(frozen=True)
class SlotCount:
    """The cluster in worker slots.

    Attributes:
        unit: the worker size one slot stands for.
        held: slots the jobs' allocated workers take.
        free: slots free now, after the room the jobs' other containers will take; negative when those
            containers need workers to go first.
        reserved: slots those other containers (ApplicationMasters, drivers not placed yet) take.
        per_node: free slots by node id.
    """

    unit: Resources
    held: int
    free: int
    reserved: int
    per_node: Mapping[str, int]

    @property
    def capacity(self) -> int:
        """Slots the jobs may hold in total (never below 0)."""
        return max(0, self.held + self.free)


def slot_unit(sizes: Iterable[Resources]) -> Resources:
    """The smallest size every one of ``sizes`` fits in: the most memory, the most vcores and the most GPUs.

    Raises:
        ValueError: no sizes.
    """
    sizes = list(sizes)
    if not sizes:
        raise ValueError("slot_unit needs at least one worker size")
    return Resources(max(s.memory_mb for s in sizes), max(s.vcores for s in sizes), max(s.gpus for s in sizes))


def place(room: Mapping[str, Resources], containers: Iterable[Resources], unit: Resources) -> dict[str, Resources]:
    """The room left on each node once ``containers`` are placed, largest first, each on the node where
    it costs the fewest slots of ``unit`` (then the tightest fit, which keeps large holes whole). A
    container that fits nowhere goes where it costs the fewest slots too (then the most free memory),
    and that node's room becomes short (negative)."""
    left = dict(room)
    if not left:
        return left
    for container in sorted(containers, key=lambda c: (c.gpus, c.memory_mb, c.vcores), reverse=True):

        def cost(n: str, c: Resources = container) -> int:
            return left[n].count(unit) - (left[n] - c).count(unit)

        fitting = [n for n, r in left.items() if r.holds(container)]
        if fitting:
            node = min(fitting, key=lambda n: (cost(n), left[n].memory_mb, n))
        else:
            node = min(left, key=lambda n: (cost(n), -left[n].memory_mb, -left[n].vcores, n))
        left[node] = left[node] - container
    return left


def fit(room: Mapping[str, Resources], containers: Iterable[Resources]) -> dict[str, Resources] | None:
    """The room left once ``containers`` are placed first-fit, largest first, where each fits whole; None
    when one of them fits on no node."""
    left = dict(room)
    for container in sorted(containers, key=lambda c: (c.gpus, c.memory_mb, c.vcores), reverse=True):
        node = next((n for n, r in sorted(left.items()) if r.holds(container)), None)
        if node is None:
            return None
        left[node] = left[node] - container
    return left


def count_slots(nodes: Sequence[NodeResources], jobs: Mapping[str, JobFootprint]) -> SlotCount | None:
    """Worker slots of ``nodes`` for ``jobs`` (None when there is no job to size a slot by)."""
    if not jobs:
        return None
    unit = slot_unit(fp.worker for fp in jobs.values())
    room = {n.node_id: n.free for n in nodes}
    left = place(room, [c for fp in jobs.values() for c in fp.unplaced], unit)
    per_node = {node_id: r.count(unit) for node_id, r in sorted(left.items())}
    free = sum(per_node.values())
    held = sum(fp.workers_allocated for fp in jobs.values())
    reserved = sum(r.count(unit) for r in room.values()) - free
    return SlotCount(unit=unit, held=held, free=free, reserved=reserved, per_node=per_node)


class CapacityFilter:
    """Lets a drop of capacity count only once it has lasted ``window`` seconds; a rise counts at once.

    YARN's view moves for a moment for reasons that are no loss of room: a container allocated a
    heartbeat before its service reports it, a node re-registering. The controller resizes nothing for
    those: it acts on the highest capacity in force at any time within the last ``window`` seconds (of
    the same slot unit), so a lower figure counts once a round at least ``window`` later still sees it.

    Args:
        window: seconds a lower capacity must persist.

    Raises:
        ValueError: ``window`` is negative.
    """

    def __init__(self, window: float) -> None:
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.window = window
        self._unit: Resources | None = None
        self._seen: list[tuple[float, int]] = []

    def update(self, now: float, unit: Resources | None, capacity: int) -> int:
        """Record ``capacity`` (slots of ``unit``) seen at ``now``; returns the capacity to act on."""
        if unit != self._unit:
            self._unit, self._seen = unit, []
        self._seen.append((now, capacity))
        start = now - self.window
        older = [i for i, (t, _) in enumerate(self._seen) if t <= start]
        if older:
            self._seen = self._seen[older[-1] :]  # the figure in force when the window opened, and later ones
        return max(c for _, c in self._seen)
