"""Emulated accelerators: a training step held for the time a measured GPU profile gives it.

On a machine without GPUs, more data-parallel workers are never faster: every worker shares the same cores.
To show a live run in which parallelism pays as it does on GPUs, only the accelerator is emulated. The step's
model math, its gradients and their allreduce run for real; then the step is held until the device time the
profile gives for its per-GPU batch and the job's placement has passed since the step began. Everything else
(the ring's re-forms, commits, YARN, the metrics and the controller's decisions) is the real system.

The profiles are the measured iteration times the simulator replays (:mod:`submarine_elastic.sim.physics`:
cifar10 ResNet-18, BERT, YOLOv3, DeepSpeech2, ImageNet ResNet-50, NCF on real GPUs), so a job's step time
means the same live and simulated. A step of global batch ``B`` in ``m`` micro-batches on ``k`` workers runs
``B / (k m)`` samples per GPU and micro-batch; it is held for the profile's step time of that local batch on
the job's placement (GPUs per node), plus ``m - 1`` times the step time less its synchronisation part (the
micro-batches that do not allreduce), as the simulator charges it. A micro-batch larger than the largest
per-GPU batch the profile measured would not fit the device: it is charged as that many more micro-batches.

The placement is read from the ring: each rank names its node (the NodeManager, ``NM_HOST:NM_PORT``, that
YARN sets in its container; the host name outside YARN) and the names are gathered over the ring at the first
step after each re-form (:meth:`EmulatedAccelerator.reset`, a reset callback of the elastic state).

Ratios are what such a run measures (elastic against static, live against simulated) and the system's own
overheads; absolute times hold only on real GPUs. Every output of such a run says "emulated".

Use it from a training step::

    device = EmulatedAccelerator.for_job("cifar10")     # refuses a YARN container that holds no GPU
    state.register_reset_callbacks([device.reset])
    started = time.perf_counter()
    ... the real step ...
    device.hold(started, global_batch, micro_batches)   # before the step's time is measured and reported
"""

from __future__ import annotations

import logging
import math
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from submarine_elastic import env

if TYPE_CHECKING:
    from submarine_elastic.sim.physics import Application

logger = logging.getLogger(__name__)

#: What every output of an emulated run is marked with.
EMULATED = "emulated"
#: Steps whose real work outran the device time before a warning is logged (and once more at every tenfold).
OVERRUN_WARN_AFTER = 10

#: Gathers one value from every rank of the ring, in rank order.
Gather = Callable[[str], Sequence[str]]


class EmulationError(RuntimeError):
    """An accelerator cannot be emulated as asked (unknown profile, no GPU in the container)."""


@dataclass
class EmulationStats:
    """What the emulation did so far: steps held, seconds held, and steps whose real work took longer than
    the device time (those ran at the real speed: the emulation is then slower than the GPU it stands for)."""

    steps: int = 0
    held_s: float = 0.0
    device_s: float = 0.0
    overruns: int = 0

    def summary(self) -> str:
        share = self.held_s / self.device_s if self.device_s > 0 else 0.0
        return (
            f"{EMULATED}: {self.steps} steps, {self.device_s:.1f} s of device time, {share:.0%} of it held, "
            f"{self.overruns} steps outran it"
        )


def _horovod_gather(value: str) -> Sequence[str]:
    import horovod.tensorflow as hvd

    return [str(v) for v in hvd.allgather_object(value)]


def node_name() -> str:
    """This process's node: the NodeManager YARN runs its container on, else the host name."""
    return env.settings().node_id() or socket.gethostname()


def placement_of(nodes: Sequence[str]) -> tuple[int, ...]:
    """GPUs per node of a ring whose ranks run on ``nodes`` (one GPU a rank), most first."""
    if not nodes:
        raise ValueError("a ring has at least one rank")
    return tuple(sorted(Counter(nodes).values(), reverse=True))


class EmulatedAccelerator:
    """Holds each training step for the device time of an application's measured GPU profile.

    Args:
        application: the profile's name (``submarine sim apps`` lists them).
        gather: gathers each rank's node name over the ring (default: Horovod's ``allgather_object``).
        node: this rank's node name (default :func:`node_name`).
        clock, sleep: the step's clock and the hold (tests pass their own).

    Raises:
        EmulationError: no such profile (the known ones named).
    """

    def __init__(
        self,
        application: str,
        *,
        gather: Gather | None = None,
        node: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from submarine_elastic.sim.api import UnknownApplicationError
        from submarine_elastic.sim.physics import TraceCatalog

        try:
            self.profile: Application = TraceCatalog().get(application)
        except UnknownApplicationError as exc:
            raise EmulationError(f"no GPU profile {application!r} to emulate: {exc}") from None
        self.application = application
        self._gather = gather or _horovod_gather
        self._node = node if node is not None else node_name()
        self._clock = clock
        self._sleep = sleep
        self._placement: tuple[int, ...] | None = None
        self.stats = EmulationStats()
        self._warned_at = 0

    @classmethod
    def for_job(cls, application: str, **kwargs: object) -> EmulatedAccelerator:
        """The emulated accelerator of a job's worker, refusing a YARN container that was given no GPU: the
        device it stands for must be one YARN accounts for (``job run --worker_resources gpu=1``)."""
        if env.settings().node_id() and env.settings().worker_gpus < 1:
            raise EmulationError(
                f"--emulate {application}: this worker's container holds no GPU; submit the job with "
                "--worker_resources ...,gpu=1 on a cluster with GPUs (submarine cluster up --gpus-per-node N)"
            )
        return cls(application, **kwargs)  # type: ignore[arg-type]

    def reset(self) -> None:
        """The ring changed: the placement is gathered again at the next step."""
        self._placement = None

    def placement(self) -> tuple[int, ...]:
        """GPUs per node of the current ring (gathered once a ring, on every rank at the same step)."""
        if self._placement is None:
            self._placement = placement_of(self._gather(self._node))
        return self._placement

    def device_seconds(self, placement: tuple[int, ...], global_batch: int, micro_batches: int = 1) -> float:
        """The profile's time of one step of ``global_batch`` samples in ``micro_batches`` on ``placement``."""
        if global_batch < 1 or micro_batches < 1:
            raise ValueError(f"a step has a batch and micro-batches >= 1, got {global_batch}, {micro_batches}")
        local = global_batch / sum(placement)
        # A per-GPU batch above the largest the profile measured does not fit the device: it runs in more
        # micro-batches, as the simulator charges it.
        micro = max(micro_batches, math.ceil(local / self.profile.max_local_bsz - 1e-9))
        step, sync = self.profile.step_time(placement, local / micro)
        return step + (micro - 1) * (step - sync)

    def hold(self, started: float, global_batch: int, micro_batches: int = 1) -> float:
        """Wait until the step begun at ``started`` (this accelerator's clock) has lasted its device time;
        returns that time. A step whose real work already took longer is not held (and counted)."""
        device = self.device_seconds(self.placement(), global_batch, micro_batches)
        left = started + device - self._clock()
        self.stats.steps += 1
        self.stats.device_s += device
        if left > 0:
            self._sleep(left)
            self.stats.held_s += left
        else:
            self.stats.overruns += 1
            if self.stats.overruns >= max(OVERRUN_WARN_AFTER, self._warned_at * 10):
                self._warned_at = self.stats.overruns
                logger.warning(
                    "%s %s: %d of %d steps took longer than the %.3f s the profile gives (last %.3f s late): the "
                    "real work outruns the device it stands for, so this job runs slower than emulated",
                    EMULATED,
                    self.application,
                    self.stats.overruns,
                    self.stats.steps,
                    device,
                    -left,
                )
        return device
